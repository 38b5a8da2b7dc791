"""`Stats`: one metric with a reduction rule that can be merged across parallel learners."""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Iterable, Optional, Sequence, SupportsFloat, TypedDict, cast

__all__ = ["Stats", "StatsSettings"]

_REDUCES = ("mean", "min", "max", "sum")
_DEFAULT_EMA = 0.01


class StatsSettings(TypedDict, total=False):
    """The keyword settings of :class:`Stats` (``MetricsLogger.log_value`` passes them on)."""

    reduce: str
    window: Optional[int]
    ema_coeff: Optional[float]
    clear_on_reduce: bool
    throughput: bool


# Indirection so tests can drive the clock used for throughputs.
_now = time.perf_counter


def _to_float(value: object) -> float:
    if isinstance(value, float):
        return value
    try:
        return float(cast(SupportsFloat, value))  # python numbers, numpy scalars, 0-d / one-element tensors
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"Stats values must be numbers or one-element tensors, got {type(value).__name__}: {value!r}"
        ) from exc


class Stats:
    """A single metric and how it is reduced.

    Reductions (``reduce``):

    * ``"mean"`` over a sliding ``window`` of the last pushed values, or, with ``window=None``,
      an exponential moving average with coefficient ``ema_coeff`` (default 0.01):
      ``value = (1 - c) * value + c * new``; the first push sets the value.
    * ``"min"`` / ``"max"`` over the window (or over everything pushed when ``window=None``).
    * ``"sum"`` over the window, or a running sum with ``window=None``. A running sum that is not
      ``clear_on_reduce`` is a *lifetime sum* (:attr:`is_lifetime_sum`); with ``throughput=True``
      it also measures its increase per second (:meth:`peek` with ``throughput=True``).

    ``clear_on_reduce=True`` empties the stats each time :meth:`reduce` runs (per-iteration
    counters); the returned reduced copy keeps the value.

    Results of n parallel learners are merged with :meth:`merge_parallel`: means of the
    learners' values (0.1 and 0.2 -> 0.15, whatever the window), min of mins, max of maxes,
    sums of sums (lifetime sums add each learner's own total exactly once).
    """

    __slots__ = (
        "reduce_method",
        "window",
        "ema_coeff",
        "clear_on_reduce",
        "throughput",
        "_values",
        "_value",
        "_tp_time",
        "_tp_value",
    )

    def __init__(
        self,
        init_value: object = None,
        *,
        reduce: str = "mean",
        window: Optional[int] = None,
        ema_coeff: Optional[float] = None,
        clear_on_reduce: bool = False,
        throughput: bool = False,
    ) -> None:
        if reduce not in _REDUCES:
            raise ValueError(f"Stats reduce must be one of {_REDUCES}, got {reduce!r}")
        if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            raise ValueError(f"Stats window must be None or an int >= 1, got {window!r}")
        if ema_coeff is not None:
            if reduce != "mean" or window is not None:
                raise ValueError("ema_coeff only applies to reduce='mean' with window=None")
            if not 0.0 < ema_coeff <= 1.0:
                raise ValueError(f"ema_coeff must be in (0, 1], got {ema_coeff!r}")
        elif reduce == "mean" and window is None:
            ema_coeff = _DEFAULT_EMA
        if throughput and (reduce != "sum" or window is not None):
            raise ValueError("throughput=True needs reduce='sum' and window=None (a running sum)")
        self.reduce_method = reduce
        self.window = window
        self.ema_coeff = ema_coeff
        self.clear_on_reduce = clear_on_reduce
        self.throughput = throughput
        # window 1 keeps its single value in _value (no deque: cheap to create on the hot path)
        self._values: Optional[deque] = deque(maxlen=window) if window is not None and window > 1 else None
        self._value: Optional[float] = None
        self._tp_time: Optional[float] = _now() if throughput else None
        self._tp_value: Optional[float] = 0.0 if throughput else None
        if init_value is not None:
            self.push(init_value)

    # ------------------------------------------------------------------ building
    @classmethod
    def _like(cls, other: "Stats") -> "Stats":
        """An empty Stats with the same settings as ``other`` (throughput clock restarted)."""
        return cls(
            reduce=other.reduce_method,
            window=other.window,
            ema_coeff=other.ema_coeff if other.window is None and other.reduce_method == "mean" else None,
            clear_on_reduce=other.clear_on_reduce,
            throughput=other.throughput,
        )

    @classmethod
    def _make(cls, value: float, reduce: str, window: Optional[int], clear_on_reduce: bool = False) -> "Stats":
        """Fast unchecked constructor for the learner's hot path (``value`` must be a float)."""
        s = object.__new__(cls)
        s.reduce_method = reduce
        s.window = window
        s.ema_coeff = _DEFAULT_EMA if (reduce == "mean" and window is None) else None
        s.clear_on_reduce = clear_on_reduce
        s.throughput = False
        if window is None or window == 1:
            s._values = None
            s._value = value
        else:
            s._values = deque((value,), maxlen=window)
            s._value = None
        s._tp_time = None
        s._tp_value = None
        return s

    @property
    def is_lifetime_sum(self) -> bool:
        """True for a running sum that is never cleared (merged by replacing, never re-added)."""
        return self.reduce_method == "sum" and self.window is None and not self.clear_on_reduce

    def push(self, value: object) -> None:
        """Add one value according to the reduction rule."""
        v = _to_float(value)
        if self._values is not None:
            self._values.append(v)
            return
        cur = self._value
        if cur is None or self.window == 1:
            self._value = v
            return
        method = self.reduce_method
        if method == "sum":
            self._value = cur + v
        elif method == "mean":
            c = self.ema_coeff
            assert c is not None  # set for every mean without a window
            self._value = (1.0 - c) * cur + c * v
        elif method == "min":
            if v < cur or math.isnan(v):
                self._value = v
        else:  # max
            if v > cur or math.isnan(v):
                self._value = v

    def set(self, value: object) -> None:
        """Replace the content by a single value (used for lifetime sums on merge)."""
        v = _to_float(value)
        if self._values is not None:
            self._values.clear()
            self._values.append(v)
        else:
            self._value = v

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        if self._values is not None:
            return len(self._values)
        return 0 if self._value is None else 1

    def peek(self, *, throughput: bool = False) -> float:
        """The current reduced value (nan for an empty mean/min/max, 0.0 for an empty sum).

        With ``throughput=True`` (only for ``throughput`` stats): the increase per second since
        the stats were created or last reduced.
        """
        if throughput:
            if not self.throughput:
                raise ValueError("peek(throughput=True) needs Stats(..., reduce='sum', throughput=True)")
            assert self._tp_time is not None and self._tp_value is not None  # throughput stats have both
            dt = _now() - self._tp_time
            inc = self.peek() - self._tp_value
            return inc / dt if dt > 0 else 0.0
        vals = self._values
        method = self.reduce_method
        if vals is None:
            if self._value is None:
                return 0.0 if method == "sum" else math.nan
            return self._value
        if not vals:
            return 0.0 if method == "sum" else math.nan
        if method == "mean":
            return math.fsum(vals) / len(vals)
        if method == "sum":
            return math.fsum(vals)
        if method == "min":
            return min(vals)
        return max(vals)

    def __float__(self) -> float:
        return self.peek()

    def __repr__(self) -> str:
        extra = f", window={self.window}" if self.window is not None else ""
        if self.ema_coeff is not None:
            extra += f", ema_coeff={self.ema_coeff}"
        if self.clear_on_reduce:
            extra += ", clear_on_reduce=True"
        if self.throughput:
            extra += ", throughput=True"
        return f"Stats({self.peek()!r}, reduce={self.reduce_method!r}{extra})"

    # ------------------------------------------------------------------ reducing / merging
    def reduce(self) -> "Stats":
        """Return a copy holding the current reduced value; clear self if ``clear_on_reduce``.

        Windowed stats keep their window (the copy carries the window's values too, so a
        later merge or peek sees the same numbers); throughput stats restart their clock.
        """
        out = Stats._like(self)
        if self._values is not None:
            assert out._values is not None  # the same window
            out._values.extend(self._values)
        else:
            out._value = self._value
        if self.throughput:
            now = _now()
            out._tp_time, out._tp_value = self._tp_time, self._tp_value
            self._tp_time = now
            self._tp_value = 0.0 if self.clear_on_reduce else self.peek()
        if self.clear_on_reduce:
            self.clear()
        return out

    def clear(self) -> None:
        """Drop every value."""
        if self._values is not None:
            self._values.clear()
        self._value = None

    @staticmethod
    def merge_parallel(stats: Sequence["Stats"]) -> "Stats":
        """Merge the same metric reported by n parallel sources into one new Stats.

        mean -> mean of the sources' values (empty sources ignored), min -> min, max -> max,
        sum -> sum. The result has the settings of the first source.
        """
        if not stats:
            raise ValueError("merge_parallel needs at least one Stats")
        first = stats[0]
        values = [s.peek() for s in stats if len(s)]
        out = Stats._like(first)
        if values:
            method = first.reduce_method
            if method == "mean":
                out.push(math.fsum(values) / len(values))
            elif method == "sum":
                out.push(math.fsum(values))
            elif method == "min":
                out.push(min(values))
            else:
                out.push(max(values))
        return out

    def merge_in(self, merged: "Stats") -> None:
        """Fold an already merged-in-parallel result of this iteration into self.

        Lifetime sums are replaced (each source reports its own running total, so adding
        would count earlier iterations twice); everything else is pushed as one new value.
        """
        if not len(merged):
            return
        if self.is_lifetime_sum:
            self.set(merged.peek())
        else:
            self.push(merged.peek())

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        """A plain dict (only str/float/int/bool/None/list) restoring this Stats via from_state."""
        return {
            "reduce": self.reduce_method,
            "window": self.window,
            "ema_coeff": self.ema_coeff,
            "clear_on_reduce": self.clear_on_reduce,
            "throughput": self.throughput,
            "values": list(self._values) if self._values is not None else None,
            "value": self._value,
        }

    @classmethod
    def from_state(cls, state: dict) -> "Stats":
        """Rebuild a Stats from :meth:`get_state` output."""
        window = state.get("window")
        reduce = state.get("reduce", "mean")
        out = cls(
            reduce=reduce,
            window=window,
            ema_coeff=state.get("ema_coeff") if (reduce == "mean" and window is None) else None,
            clear_on_reduce=bool(state.get("clear_on_reduce", False)),
            throughput=bool(state.get("throughput", False)),
        )
        if out._values is not None:
            out._values.extend(float(v) for v in state.get("values") or ())
        elif state.get("value") is not None:
            out._value = float(state["value"])
        return out

    @staticmethod
    def peek_values(values: Iterable["Stats"]) -> list:
        """[s.peek() for s in values] (convenience)."""
        return [s.peek() for s in values]
