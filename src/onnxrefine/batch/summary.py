"""The one summary of a batch run: a terminal table, summary.json and a self-contained HTML page."""

from __future__ import annotations

import html
import json
import os

from rich.table import Table

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


def table(command: str, rows: list[dict]) -> Table:
    result = Table(title=f"onnxrefine {command}: {len(rows)} models")
    for name, _ in COLUMNS:
        result.add_column(name, overflow="fold")
    for row in rows:
        result.add_row(*cells(row))
    total = totals(rows)
    result.add_section()
    nodes = f"{total['nodes_before']} -> {total['nodes_after']}" if total["nodes_before"] else ""
    result.add_row(f"total ({total['ok']} ok, {total['failed']} failed)", "", "", nodes,
                   f"{_size(total['size_before'])} -> {_size(total['size_after'])}" if nodes else "",
                   f"{total['seconds']:.1f}", "", str(total["refused"]), "")
    return result


def write(folder: str, command: str, rows: list[dict], settings: dict) -> tuple[str, str]:
    from onnxrefine.atomic import write_atomic

    os.makedirs(folder, exist_ok=True)
    data = {"command": command, "settings": settings, "totals": totals(rows), "models": rows}
    json_path = os.path.join(folder, "summary.json")
    html_path = os.path.join(folder, "summary.html")
    write_atomic(json_path, json.dumps(data, indent=2) + "\n")
    write_atomic(html_path, page(command, rows))
    return json_path, html_path


def page(command: str, rows: list[dict]) -> str:
    total = totals(rows)
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in COLUMNS)
    body = []
    for row in rows:
        status = "ok" if row["status"] == "ok" else "bad"
        body.append(f'<tr class="{status}">' + "".join(f"<td>{html.escape(c)}</td>" for c in cells(row)) + "</tr>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>onnxrefine {command}: {len(rows)} models</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}tr.bad td{{background:#fdd}}</style></head>
<body><h1>onnxrefine {command}: {len(rows)} models</h1>
<p>{total['ok']} ok, {total['failed']} failed; nodes {total['nodes_before']} &rarr; {total['nodes_after']};
size {_size(total['size_before'])} &rarr; {_size(total['size_after'])}; {total['refused']} refused rewrites;
{total['seconds']:.1f} s of model time.</p>
<table><tr>{head}</tr>
{chr(10).join(body)}
</table></body></html>
"""
