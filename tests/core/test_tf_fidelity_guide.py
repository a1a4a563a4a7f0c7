"""Issue 27 item 8: docs/guide/from-tensorflow.md runs as written and prints what it shows.

Same rules as tests/core/test_guide.py: the ```python blocks run in order as one
script in a fresh interpreter (GPU disabled, cwd a temporary directory); a
```text block right after a python block is its exact stdout. The ```py blocks
are TensorFlow's originals and are not run.
"""

from __future__ import annotations

from pathlib import Path

from tests.core.test_guide import guide_blocks, run_guide

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "from-tensorflow.md"
VARIABLES_GUIDE = PAGE.parent / "variables.md"


def test_every_tensorflow_snippet_is_followed_by_its_translation():
    text = PAGE.read_text(encoding="utf-8")
    fences = [line for line in text.splitlines() if line.startswith("```") and line != "```"]
    kinds = [line[3:] for line in fences]
    assert kinds.count("py") >= 30
    for index, kind in enumerate(kinds):
        if kind == "py":
            assert kinds[index + 1] == "python", f"TF snippet number {kinds[:index].count('py') + 1} has no translation"


def test_the_page_covers_both_guides_and_lists_its_deviations():
    text = PAGE.read_text(encoding="utf-8")
    for snippet in ['vs.Variable(my_tensor, name="Mark")', "a.assign_sub([7, 9])", 'vs.device("GPU:0")',
                    'vs.get_variable("my_int_variable"', "vs.LOCAL_VARIABLES", "vs.replica_device_setter(cluster=cluster_spec)",
                    "v.initialized_value() + 1", "v.read_value()", 'vs.restore("model.h5", {"v2": v2})',
                    "vs.random_normal_initializer()", 'vs.variable_scope(scope, reuse=True)', "## Deliberate deviations"]:
        assert snippet in text, snippet
    assert "from-tensorflow.md" in VARIABLES_GUIDE.read_text(encoding="utf-8")


def test_the_page_runs_and_prints_what_it_shows(tmp_path):
    blocks = guide_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 30
    outputs = run_guide(blocks, tmp_path)
    assert len(outputs) == len(blocks)
    for number, ((code, expected), actual) in enumerate(zip(blocks, outputs), start=1):
        assert actual == expected, f"python block {number} printed something else:\n{code}\n--- got:\n{actual}"
