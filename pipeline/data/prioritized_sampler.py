"""Prioritized replay as a sampler: :class:`PrioritizedSampler` (Schaul et al. 2016).

The sampler keeps per-slot state beside a buffer's :class:`~pipeline.data.storage.SlotStorage`
(raw priorities, a sum/min tree of ``priority ** alpha``, which slots' ``meta["priority"]`` is not
written yet) through the storage interface documented there: it listens to the storage
(``on_push``/``on_remove``/``on_clear``/``on_load``, ``sync_meta``) and reads ``size``, ``count``,
``dense``, ``slot_id``, ``id2slot``, ``items``, ``version``, ``rng``. How it draws slots and weighs
them lives in :mod:`.per_sampling`, how it takes new priorities in :mod:`.per_update`.

Use it as ``DequeBuffer(size, sampler=PrioritizedSampler(alpha=0.6, beta=0.4, anneal=1e5))``; the
DI-engine style ``buf.use(PriorityExperienceReplay(buf))`` (:mod:`.per`) wraps one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _accel
from .item import BufferedData, _Sampled
from .per_sampling import PrioritySampling
from .per_update import PriorityUpdates
from .sampler import _bind, check_priority
from .segment_tree import SumMinTree
from .storage import SlotStorage

__all__ = ["PrioritizedSampler"]


class PrioritizedSampler(PrioritySampling, PriorityUpdates):
    """Draws stored items with probability ``p ** alpha / sum`` and weighs them for the loss.

    - ``alpha``: how much the priorities count (0: uniform). ``beta``: the importance-sampling (IS)
      exponent at the start; it goes linearly to 1 over ``anneal`` draws. ``is_weight=False``: no
      weights (``SampledBatch.weight`` is None).
    - A pushed item's priority is ``meta["priority"]`` if given (finite, ``>= 0``), else the largest
      priority seen so far (written back into ``meta["priority"]``).
    - :meth:`update_priority` (``buffer.update_priority``) sets new priorities; the items'
      ``meta["priority"]`` follows lazily (written when an item is next read through the buffer;
      at once for the items of the last ``sample()``). :meth:`priority` reads the current value.
    - Weights: ``(p_i / p_min) ** -beta`` on the ``p ** alpha`` leaves (at most 1), as float32.
    - Without replacement the draw is exact successive sampling (each next item proportional to the
      priorities of those not drawn yet): the first distinct items of an i.i.d. stream, by rejection
      sampling (a uniform item accepted with probability ``leaf / bound``) while the acceptance
      rate is at least 0.2 and ``k * 8 <= count``, else from the sum tree. With replacement:
      stratified draws from the sum tree. From a ``sample_range`` pool: Gumbel top-k / inverse CDF.
    - ``groupby`` sampling is not supported (``supports_groupby`` is False).

    Hot loops (rejection sampler, tree refresh and draws, weights, meta writes, priority updates) run
    in the compiled extension ``pipeline/data/_per_kernels.c`` when it is built, else in numpy (also
    with ``RLPIPE_NO_EXT=1``): :attr:`kernel` says which. Both draw from the same laws; for one seed
    their samples differ. One sampler serves one storage (and the buffer views that share it).
    """

    _FLOOR = 1e-10
    wants_priorities = True
    supports_groupby = False

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, anneal: float = 1e5, is_weight: bool = True) -> None:
        if not alpha >= 0:
            raise ValueError(f"alpha (priority_power_factor) must be >= 0, got {alpha}")
        if not 0 <= beta <= 1:
            raise ValueError(f"beta (IS_weight_power_factor) must be in [0, 1], got {beta}")
        if not anneal > 0:
            raise ValueError(f"anneal (IS_weight_anneal_train_iter) must be > 0, got {anneal}")
        self.alpha = float(alpha)
        self.beta0 = float(beta)
        self.anneal = float(anneal)
        self.IS_weight = bool(is_weight)
        self.storage: Optional[SlotStorage] = None
        self._s: Any = None  # the storage, under the name the mixins use
        # the compiled kernels (pipeline/data/_per_kernels.c) or None: the same work in numpy
        self._ext = _accel.EXT
        self._tree: Any = None
        self.max_priority = 1.0
        self.sample_count = 0
        self._acc = 0.5  # running estimate of the rejection sampler's acceptance rate
        self._ri = self._ru = np.zeros(0)  # random blocks for the rejection sampler
        self._rpos = 0
        self._rn = -1
        self._ntight = 64
        # the last draw: (ids or None, slots, storage version, slots distinct?, the stored items or None)
        self._last: Optional[tuple] = None
        self._wargs = (1.0, 0.0)  # (smallest leaf, beta) the last draw's weights were computed with
        self._raw = np.zeros(0)
        self._stale = np.zeros(0, dtype=bool)

    def __repr__(self) -> str:
        return (f"PrioritizedSampler(alpha={self.alpha}, beta={self.beta0}, anneal={self.anneal:g}, "
                f"is_weight={self.IS_weight})")

    def __getstate__(self) -> dict:
        """``copy.deepcopy`` / pickle (with the buffer): not the kernels module, and not the random
        blocks drawn ahead from the original's stream (a copy draws from its storage's own stream)."""
        state = _accel.state_without_ext(self)
        state["_ri"] = state["_ru"] = np.zeros(0)
        state["_rpos"] = 0
        state["_rn"] = -1
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(_accel.ext_from_state(state))

    def attach(self, storage: SlotStorage) -> None:
        """Bind to ``storage``: size the tree, listen to the storage, take the priorities of what it
        holds (``meta["priority"]``, else the largest seen)."""
        if not isinstance(storage, SlotStorage):
            raise TypeError(f"PrioritizedSampler needs a SlotStorage, got {type(storage).__name__}")
        with storage.lock:
            if not _bind(self, storage):
                return
            self._s = storage
            self._tree = SumMinTree(storage.size, ext=self._ext)
            self._raw = np.zeros(storage.size)  # raw priority per slot
            self._stale = np.zeros(storage.size, dtype=bool)  # meta["priority"] not yet written
            storage.add_listener(self)  # on_push/on_remove/on_clear/on_load, and sync_meta
            self.on_load()

    @property
    def kernel(self) -> str:
        """Which hot loops run: ``"C"`` (the compiled ``_per_kernels`` extension) or ``"numpy"``
        (extension not built, or ``RLPIPE_NO_EXT=1``). Both draw from the same laws."""
        return _accel.kernel_name(self._ext)

    @property
    def beta(self) -> float:
        """Current IS exponent."""
        return min(1.0, self.beta0 + (1.0 - self.beta0) * self.sample_count / self.anneal)

    # ------------------------------------------------------------------ the sampler interface
    def draw(self, k: int, replace: bool, pool: Optional[np.ndarray] = None
             ) -> Tuple[np.ndarray, Optional[List[int]], Optional[np.ndarray]]:
        """``k`` slots drawn by priority (see the class docstring), their items' indices (remembered:
        :meth:`update_priority` with exactly these indices skips the index -> slot lookups) and their
        IS weights; one sample."""
        s = self._s
        slots = self._draw(k, replace) if pool is None else self._draw_pool(pool, k, replace)
        w = None
        if self.IS_weight:
            mn, b = self._tree.min, self.beta
            self._wargs = (mn, b)
            w = self._weights_at(slots, mn, b)
        self.sample_count += 1
        ids = s.slot_id.take(slots).tolist()
        self._last = (list(ids), slots, s.version, not replace, None)  # a copy: the caller may change its list
        return slots, ids, w

    def weights(self, slots: np.ndarray) -> Optional[np.ndarray]:
        """The IS weights of these slots now (``sample(indices=...)``), or None without ``is_weight``."""
        return self._weights(slots) if self.IS_weight else None

    def items(self, slots: np.ndarray, weights: Optional[np.ndarray], replace: bool, meta_weights: bool) -> _Sampled:
        """The stored items of the slots just drawn (the storage's sample list), their lazily kept
        ``meta["priority"]`` written, and ``meta["priority_IS"]`` from ``weights`` when ``meta_weights``.
        With the compiled kernels one pass takes the items and writes their meta."""
        s = self._s
        w = weights if meta_weights else None
        if replace or len(s.syncers) != 1:  # repeats are copied, other listeners sync their meta: the storage
            res = s.result(slots, True, replace)
            if w is not None:
                for it, x in zip(res, w.tolist()):
                    it.meta["priority_IS"] = x
            return res
        ext = self._ext
        if ext is not None:
            res = _Sampled()
            if w is not None:  # rewrites the same weights (same leaves, min and beta) into meta
                mn, b = self._wargs
                ext.take_items(s.items, slots, res, None, self._tree._leaf, mn, b, w, self._stale, self._raw)
            else:
                ext.take_items(s.items, slots, res, None, self._tree._leaf, 1.0, 0.0, None, self._stale, self._raw)
            # ref (the items sample_batch checks a chain's result against) only when a batch is built
            res.slots, res.ref, res.pushes, res.version, res.columns = (slots, () if meta_weights else tuple(res),
                                                                        s.pushes, s.version, None)
        else:
            res = s.result(slots, False, False)
            self._write_meta(res, slots, w)
        last = self._last
        if last is not None and last[1] is slots:
            self._last = (last[0], slots, last[2], True, res)  # distinct stored items: an update writes their meta
        return res

    def _write_meta(self, res: List[Any], slots: np.ndarray, weights: Optional[np.ndarray]) -> None:
        stale = self._stale.take(slots)
        if stale.any():
            pl = self._raw.take(slots).tolist()
            wl = weights.tolist() if weights is not None else None
            for j, (it, st) in enumerate(zip(res, stale.tolist())):
                m = it.meta
                if wl is not None:
                    m["priority_IS"] = wl[j]
                if st:
                    m["priority"] = pl[j]
            self._stale[slots] = False
        elif weights is not None:
            for it, w in zip(res, weights.tolist()):
                it.meta["priority_IS"] = w

    # ------------------------------------------------------------------ storage listener
    def _leaf(self, p: float) -> float:
        return max(p, self._FLOOR) ** self.alpha

    def _set(self, slot: int, p: float) -> None:
        if p > self.max_priority:
            self.max_priority = p
        self._raw[slot] = p
        self._stale[slot] = False
        self._tree.set(slot, self._leaf(p))

    def on_push(self, slot: int, item: BufferedData) -> None:
        """A new item: its ``meta["priority"]``, or the largest priority so far (written to its meta)."""
        p = item.meta.get("priority")
        try:
            p = check_priority(p) if p is not None else None
        except ValueError:
            p = None
        if p is None:
            p = self.max_priority
            item.meta["priority"] = p
        self._set(slot, p)

    def on_remove(self, slot: int) -> None:
        """A slot emptied: it is never drawn."""
        self._stale[slot] = False
        self._tree.set(slot, 0.0)

    def on_clear(self) -> None:
        """Every slot emptied."""
        self._stale[:] = False
        self._tree.clear()

    def on_load(self) -> None:
        """The storage's contents replaced: rebuild from the stored items' meta."""
        self._tree.clear()
        s = self._s
        for slot in s.dense[: s.count].tolist():
            self.on_push(slot, s.items[slot])

    def sync_meta(self, slots: np.ndarray) -> None:
        """Write priorities set by :meth:`update_priority` into these items' ``meta["priority"]``."""
        st = self._stale[slots]
        if st.any():
            todo = slots[st]
            items = self._s.items
            for slot, p in zip(todo.tolist(), self._raw[todo].tolist()):
                items[slot].meta["priority"] = p
            self._stale[todo] = False

    def priority(self, index: int) -> Optional[float]:
        """The current priority of item ``index`` (None if it is not stored)."""
        with self._s.lock:
            slot = self._s.id2slot.get(index)
            return None if slot is None else float(self._raw[slot])

    # ------------------------------------------------------------------ state
    def state_dict(self) -> Dict[str, Any]:
        """Counters plus every live item's priority (by index); loads with ``torch.load(weights_only=True)``."""
        with self._s.lock:
            s = self._s
            slots = s.ordered_slots().tolist()
            return {
                "max_priority": float(self.max_priority),
                "sample_count": int(self.sample_count),
                "indices": [s.items[k].index for k in slots],
                "priorities": self._raw[np.asarray(slots, dtype=np.int64)].tolist(),
            }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (priorities of indices no longer stored are ignored)."""
        for key in ("max_priority", "sample_count", "indices", "priorities"):
            if key not in state:
                raise ValueError(f"PriorityExperienceReplay.load_state_dict: missing {key!r}")
        with self._s.lock:
            self.max_priority = float(state["max_priority"])
            self.sample_count = int(state["sample_count"])
            s = self._s
            for i, p in zip(state["indices"], state["priorities"]):
                slot = s.id2slot.get(int(i))
                if slot is not None:
                    p = check_priority(p)
                    s.items[slot].meta["priority"] = p
                    self._raw[slot] = p
                    self._stale[slot] = False
                    self._tree.set(slot, self._leaf(p))
