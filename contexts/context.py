"""The per-iteration contexts that middleware share.

A context is a dataclass that accepts extra attributes. At the end of every step the runtime calls
``renew()``, which returns a fresh context of the same type: every field back to its default, except the
keys passed to ``keep()`` (they last for every later renew) and ``total_step``, which goes up by one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, FrozenSet, List, Optional, Tuple, Type, Union

if TYPE_CHECKING:
    from pipeline.data.records import TrainBatch, TrainOutput, Transition


_Factories = Tuple[Tuple[str, Callable[[], object]], ...]


def _factories_of(cls: Type["Context"]) -> _Factories:
    """The fields of a context class whose defaults come from a factory (computed once per class).

    Fields with a plain default need no per-instance value: a dataclass keeps that default as a class
    attribute, so a renewed context with an empty ``__dict__`` reads it from the class.
    """
    factories: List[Tuple[str, Callable[[], object]]] = []
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            factories.append((f.name, f.default_factory))
        elif f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} needs a default so that the context can be renewed")
    cls._renew_factories = found = tuple(factories)
    return found


@dataclass
class Context:
    """The base context: a step counter plus whatever attributes middleware set on it.

    Fields: ``total_step`` (steps run so far; incremented by ``renew``). Extra attributes may be set freely;
    they are dropped at renew unless kept with ``keep``.
    """

    total_step: int = 0
    _kept_keys: FrozenSet[str] = field(default=frozenset(), repr=False)
    _renew_factories: ClassVar[Optional[_Factories]] = None  # per class, filled at the first renew

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._renew_factories = None

    def keep(self, *keys: str) -> None:
        """Carry ``keys`` over every later ``renew`` (not just the next one)."""
        self._kept_keys = self._kept_keys.union(keys)

    def renew(self) -> "Context":
        """Return a fresh context of the same type with the kept keys carried and ``total_step`` + 1."""
        # Attributes are set one by one (not by assigning ``__dict__``) so that the new instance keeps
        # CPython's shared-key dict and the middleware's attribute writes stay cheap.
        cls = type(self)
        factories = cls._renew_factories
        if factories is None:
            factories = _factories_of(cls)
        new = object.__new__(cls)
        new.total_step = self.total_step + 1
        for name, factory in factories:
            setattr(new, name, factory())
        kept = self._kept_keys
        if kept:
            old = self.__dict__  # only read when there are kept keys: it costs a dict on a fresh instance
            for key in kept:
                if key in old:
                    setattr(new, key, old[key])
            new._kept_keys = kept
        return new

    def get(self, key: str, default: object = None) -> Any:
        return getattr(self, key, default)

    def __post_init__(self) -> None:
        # Subclasses list the keys they keep by default in ``_default_kept``.
        kept = getattr(type(self), "_default_kept", ())
        if kept:
            self._kept_keys = self._kept_keys.union(kept)


@dataclass
class OnlineRLContext(Context):
    """Context of an online RL pipeline (collect from envs, then learn).

    Kept across renews: ``env_step``, ``env_episode``, ``train_iter``, ``last_eval_iter``,
    ``last_eval_value`` (plus ``total_step``).

    The data path (:mod:`pipeline.data.records`): collectors write ``transitions`` (a list of
    :class:`~pipeline.data.records.Transition`) or ``episodes`` (lists of them), the fetcher writes
    ``train_data`` (a :class:`~pipeline.data.records.TrainBatch`; a dict of them for a dict of buffers;
    None when the buffer holds too little), trainers write ``train_output`` (a list of
    :class:`~pipeline.data.records.TrainOutput`, one per update; None when no trainer ran this step).
    """

    env_step: int = 0
    env_episode: int = 0
    train_iter: int = 0
    train_data: Optional[TrainBatch] = None
    train_output: Optional[List[TrainOutput]] = None
    collect_kwargs: Dict[str, object] = field(default_factory=dict)
    obs: object = None
    action: object = None
    inference_output: object = None
    transitions: Optional[List[Transition]] = None
    episodes: Optional[List[List[Transition]]] = None
    eval_value: float = float("-inf")
    last_eval_iter: int = -1
    last_eval_value: float = float("-inf")
    eval_output: Optional[Dict[str, object]] = None
    info_for_logging: Dict[str, Any] = field(default_factory=dict)

    _default_kept = ("env_step", "env_episode", "train_iter", "last_eval_iter", "last_eval_value")


@dataclass
class OfflineRLContext(Context):
    """Context of an offline RL pipeline (learn from a fixed dataset).

    Kept across renews: ``trained_env_step``, ``train_epoch``, ``train_iter``, ``last_eval_iter``,
    ``last_eval_value`` (plus ``total_step``). ``train_data`` and ``train_output`` are as in
    :class:`OnlineRLContext` (the batch comes from ``offline_data_fetcher``).
    """

    trained_env_step: int = 0
    train_epoch: int = 0
    train_iter: int = 0
    train_data: Optional[TrainBatch] = None
    train_output: Optional[List[TrainOutput]] = None
    eval_value: float = float("-inf")
    last_eval_iter: int = -1
    last_eval_value: float = float("-inf")
    eval_output: Optional[Dict[str, object]] = None
    info_for_logging: Dict[str, Any] = field(default_factory=dict)

    _default_kept = ("trained_env_step", "train_epoch", "train_iter", "last_eval_iter", "last_eval_value")


RLContext = Union[OnlineRLContext, OfflineRLContext]
"""The context type of middleware that work in online and offline pipelines (trainer, fetcher, logger...)."""
