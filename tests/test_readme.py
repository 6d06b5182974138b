"""The README's pass table is generated from the registry; it must not drift."""

from pathlib import Path

from onnxrefine.cli.optimize_cmd import passes_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_pass_table_matches_the_registry():
    text = README.read_text()
    start = text.index("<!-- passes:start -->\n") + len("<!-- passes:start -->\n")
    end = text.index("<!-- passes:end -->")
    assert text[start:end] == passes_markdown(), (
        "README pass table is stale: regenerate it with `onnxrefine optimize --list-passes --markdown`"
    )


def test_readme_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    block = lines[lines.index("```bash") + 1: lines.index("```bash") + 5]
    assert any("onnxrefine optimize examples/tiny_cnn.onnx" in line for line in block)
    assert any("python -m pytest -n 2 -q" in line for line in block)
    assert "python -m pytest -n 2 -q" in (README.parent / ".ci" / "run").read_text()
