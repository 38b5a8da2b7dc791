"""Issue 12.10: the DI-engine page exists, is linked from the README, and what it claims holds."""
from pathlib import Path

from pipeline.data import DequeBuffer, group_sample, padding

ROOT = Path(__file__).resolve().parents[2]


def test_readme_links_the_di_engine_page_which_covers_the_options_not_offered():
    readme = (ROOT / "README.md").read_text()
    assert "## Coming from DI-engine" in readme and "docs/from_di_engine.md" in readme
    page = (ROOT / "docs" / "from_di_engine.md").read_text()
    for needle in ("sliced=True", 'padding(policy="none")', "max_use_in_group", "ignore_insufficient",
                   "__new__", "async", "weight"):
        assert needle in page, needle


def test_documented_differences_hold():
    buf = DequeBuffer(10)
    buf.push("a", meta={"env": 1, "g": 0})
    assert [it.data for it in buf.sample(3, ignore_insufficient=True)] == ["a"]  # what there is
    buf.update(0, meta={"priority": 2.0})
    assert buf.get(0).meta == {"env": 1, "g": 0, "priority": 2.0}  # merged, not replaced
    assert buf.delete([0, 99]) == 1
    group_sample(2, max_use_in_group=False)  # DI-engine options that were added
    padding("none")
