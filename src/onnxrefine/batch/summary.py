"""The one summary of a batch run: the rows of its table (printed by the CLI), summary.json and a
self-contained HTML page."""

from __future__ import annotations

import html
import json
import os


COLUMNS = (("model", "model"), ("status", "status"), ("verdict", "verdict"), ("nodes", None),
           ("size", None), ("seconds", "seconds"), ("peak MiB", "peak_rss_mb"), ("refused", "refused"),
           ("error", "error"))


def _size(size) -> str:
    if size is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def cells(row: dict) -> list[str]:
    values = []
    for _, key in COLUMNS:
        if key is None:
            continue
        value = row.get(key)
        values.append("" if value is None else str(value))
    nodes = (f"{row['nodes_before']} -> {row['nodes_after']}" if row.get("nodes_before") is not None else "")
    size = (f"{_size(row.get('size_before'))} -> {_size(row.get('size_after'))}"
            if row.get("size_after") is not None else _size(row.get("size_before")))
    return values[:3] + [nodes, size] + values[3:]


def totals(rows: list[dict]) -> dict:
    done = [r for r in rows if r.get("nodes_before") is not None]
    return {
        "models": len(rows),
        "ok": sum(r["status"] == "ok" for r in rows),
        "failed": sum(r["status"] != "ok" for r in rows),
        "by_status": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
        "nodes_before": sum(r["nodes_before"] for r in done),
        "nodes_after": sum(r["nodes_after"] for r in done),
        "size_before": sum(r.get("size_before") or 0 for r in done),
        "size_after": sum(r.get("size_after") or 0 for r in done),
        "seconds": round(sum(r.get("seconds") or 0 for r in rows), 2),
        "refused": sum(r.get("refused") or 0 for r in done),
    }


def table_rows(rows: list[dict]) -> list[list[str]]:
    """The table's cells (COLUMNS), a row per model, then the totals' row."""
    total = totals(rows)
    nodes = f"{total['nodes_before']} -> {total['nodes_after']}" if total["nodes_before"] else ""
    return [*(cells(row) for row in rows),
            [f"total ({total['ok']} ok, {total['failed']} failed)", "", "", nodes,
             f"{_size(total['size_before'])} -> {_size(total['size_after'])}" if nodes else "",
             f"{total['seconds']:.1f}", "", str(total["refused"]), ""]]


def write(folder: str, command: str, rows: list[dict], settings: dict) -> tuple[str, str]:
    from onnxrefine.atomic import write_atomic

    os.makedirs(folder, exist_ok=True)
    data = {"command": command, "settings": settings, "totals": totals(rows), "models": rows}
    json_path = os.path.join(folder, "summary.json")
    html_path = os.path.join(folder, "summary.html")
    write_atomic(json_path, json.dumps(data, indent=2) + "\n")
    write_atomic(html_path, page(command, rows, folder))
    return json_path, html_path


def _link(target: str | None, folder: str, text: str) -> str:
    """A link from the summary page to `target` (relative, so the folder can be moved whole)."""
    if not target or not os.path.exists(target):
        return ""
    relative = os.path.relpath(os.path.abspath(target), os.path.abspath(folder))
    return f'<a href="{html.escape(relative.replace(os.sep, "/"))}">{html.escape(text)}</a>'


_PAGE_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}tr.bad td{background:#fdd}
.exact{color:#1a7f37}.rounding{color:#0969da}.unstable{color:#9a6700}.mismatch{color:#cf222e;font-weight:bold}
.counts span{margin-right:1.5em}"""


def page(command: str, rows: list[dict], folder: str = ".") -> str:
    """One row per model: its figures, its verdict, and links to the model, its output and its
    reports (relative to `folder`, where the page is written)."""
    total = totals(rows)
    names = [name for name, _ in COLUMNS]
    head = "".join(f"<th>{html.escape(name)}</th>" for name in names) + "<th>files</th>"
    numeric = {"nodes", "size", "seconds", "peak MiB", "refused"}
    body = []
    for row in rows:
        status = "ok" if row["status"] == "ok" else "bad"
        cells_html = []
        for name, cell in zip(names, cells(row)):
            css = "n" if name in numeric else (html.escape(cell) if name == "verdict" else "")
            cells_html.append(f'<td class="{css}">{html.escape(cell)}</td>')
        links = " ".join(link for link in (
            _link(row.get("model"), folder, "model"), _link(row.get("output"), folder, "output"),
            _link(row.get("html"), folder, "report"), _link(row.get("report"), folder, "json")) if link)
        body.append(f'<tr class="{status}">' + "".join(cells_html) + f"<td>{links}</td></tr>")
    counts = "".join(f"<span>{html.escape(status)}: {count}</span>" for status, count in total["by_status"].items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>onnxrefine {command}: {len(rows)} models</title>
<style>{_PAGE_STYLE}</style></head>
<body><h1>onnxrefine {command}: {len(rows)} models</h1>
<p class="counts">{counts}</p>
<p>{total['ok']} ok, {total['failed']} failed; nodes {total['nodes_before']} &rarr; {total['nodes_after']};
size {_size(total['size_before'])} &rarr; {_size(total['size_after'])}; {total['refused']} refused rewrites;
{total['seconds']:.1f} s of model time.</p>
<table><tr>{head}</tr>
{chr(10).join(body)}
</table></body></html>
"""
