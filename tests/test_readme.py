"""README.md: the two set-up commands come first and stay runnable, the pass table is the
registry's, and every link points at a file of the repository."""

import re
from pathlib import Path

from onnxrefine.cli.optimize_cmd import passes_markdown

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# Written alongside the README (the design and guarantees moved out of it); linked before they land.
DOCS_ON_THEIR_WAY = {"docs/verification.md", "docs/certificates.md", "docs/passes.md", "docs/design.md",
                     "CONTRIBUTING.md"}


def test_readme_pass_table_matches_the_registry():
    text = README.read_text()
    start = text.index("<!-- passes:start -->\n") + len("<!-- passes:start -->\n")
    end = text.index("<!-- passes:end -->")
    assert text[start:end] == passes_markdown(), (
        "README pass table is stale: regenerate it with `onnxrefine optimize --list-passes --markdown`"
    )


def test_readme_starts_with_the_two_set_up_commands():
    lines = README.read_text().splitlines()
    first = lines.index("```bash")
    block = lines[first + 1: lines.index("```", first + 1)]
    assert len(block) == 2 and first <= 3
    assert block[0].startswith("python3 -m venv .venv && . .venv/bin/activate && pip install")
    assert block[0].endswith("&& onnxrefine optimize examples/tiny_cnn.onnx tiny_cnn.opt.onnx")
    assert block[1] == ". .venv/bin/activate && python -m pytest -n 2 -q"
    assert (ROOT / "examples" / "tiny_cnn.onnx").is_file()
    # The test command the README gives is the one CI runs.
    assert "python -m pytest -n 2 -q" in README.read_text()
    assert "python -m pytest -n 2 -q" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_point_at_files():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if target.startswith(("http://", "https://")) or target in DOCS_ON_THEIR_WAY:
            continue
        assert (ROOT / target).exists(), target


def test_readme_anchors_name_its_sections():
    text = README.read_text()
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^##+ (.+)$", text, re.M)}
    for anchor in re.findall(r"\]\(#([^)]+)\)", text):
        assert anchor in headings, anchor
