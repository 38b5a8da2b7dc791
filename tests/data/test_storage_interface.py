"""The storage interface other storages plug into (pipeline/data/storage.py docstring)."""
import numpy as np
import torch

from pipeline.data import DequeBuffer, PrioritizedSampler, SlotStorage, StorageListener
from pipeline.data.columns import Unsupported


class CountingStorage(SlotStorage):
    """A storage that keeps its own per-slot record and refuses the columnar mirror."""

    def __init__(self, size):
        super().__init__(size, None, 0)
        self.pushed = 0

    def push(self, data, meta):
        self.pushed += 1
        return super().push(data, meta)

    def make_columns(self, example):
        raise Unsupported("this storage serves batches by collate()")


class Recorder:
    def __init__(self):
        self.events = []

    def on_push(self, slot, item):
        self.events.append(("push", item.index))

    def on_remove(self, slot):
        self.events.append(("remove", slot))

    def on_clear(self):
        self.events.append(("clear",))

    def on_load(self):
        self.events.append(("load",))


def test_a_storage_subclass_serves_a_buffer_its_views_and_prioritized_replay():
    st = CountingStorage(4)
    buf = DequeBuffer(4, storage=st, sampler=PrioritizedSampler())
    assert buf.storage is st and buf.view().storage is st
    per = buf.sampler
    for i in range(6):
        buf.push({"x": torch.tensor([float(i)])})
    assert st.pushed == 6 and buf.count() == 4 and buf.indices() == [2, 3, 4, 5]
    sb = buf.sample_batch(3)
    assert st.columns is None and sb["x"].shape == (3, 1) and sb.get("weight").shape == (3,)
    buf.update_many(sb["indices"].tolist(), meta={"priority": np.array([3.0, 4.0, 5.0])})
    assert per.priority(sb["indices"].tolist()[0]) == 3.0


def test_listeners_hear_every_change_whichever_view_made_it(tmp_path):
    buf = DequeBuffer(3)
    rec = Recorder()
    assert isinstance(rec, StorageListener)
    buf.storage.add_listener(rec)
    v = buf.view()
    v.push(1)
    buf.push(2)
    v.delete(0)
    path = str(tmp_path / "b.pt")
    buf.save_data(path)
    buf.load_data(path)
    buf.clear()
    assert rec.events == [("push", 0), ("push", 1), ("remove", 0), ("clear",), ("load",), ("clear",)]
