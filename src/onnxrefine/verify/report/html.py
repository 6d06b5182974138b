"""A self-contained HTML page for a verification report: inline CSS and SVG, no external assets.

Per output: the table row and, where a float64 reference was used, an error-versus-magnitude
scatter plot (|reference| on x, |error| on y, both log scale; original in blue, candidate in
orange). Rounding looks like two overlapping clouds; a real change lifts the candidate's cloud.
"""

from __future__ import annotations

import math
from html import escape

from onnxrefine.verify.judge import VERDICTS

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}td.l{text-align:left}
.exact{color:#1a7f37}.rounding{color:#0969da}.unstable{color:#9a6700}.mismatch{color:#cf222e;font-weight:bold}
.verdict{font-size:1.4em}.plot{display:inline-block;margin:1em 1em 0 0;vertical-align:top}
.notes li{margin:2px 0}svg text{font-size:10px;fill:#444}
"""

_WIDTH, _HEIGHT, _MARGIN = 420, 300, 48


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return escape(value)
    if value == 0:
        return "0"
    return f"{value:.3g}"


def _scatter_svg(name: str, scatter: dict) -> str:
    points = [(r, o, c) for r, o, c in zip(scatter.get("ref", []), scatter.get("orig", []),
                                           scatter.get("cand", []))]
    xs = [r for r, _, _ in points if r > 0]
    ys = [v for _, o, c in points for v in (o, c) if v > 0]
    if not xs or not ys:
        return f"<p>{escape(name)}: no nonzero errors to plot.</p>"
    x_low, x_high = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y_low, y_high = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    x_high, y_high = max(x_high, x_low + 1), max(y_high, y_low + 1)
    plot_w, plot_h = _WIDTH - 2 * _MARGIN, _HEIGHT - 2 * _MARGIN

    def px(value):
        return _MARGIN + (math.log10(value) - x_low) / (x_high - x_low) * plot_w

    def py(value):
        return _HEIGHT - _MARGIN - (math.log10(value) - y_low) / (y_high - y_low) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
             f'role="img" aria-label="error versus magnitude for {escape(name)}">',
             f'<rect x="{_MARGIN}" y="{_MARGIN}" width="{plot_w}" height="{plot_h}" '
             'fill="#fafafa" stroke="#bbb"/>']
    for exponent in range(x_low, x_high + 1):
        x = px(10.0 ** exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{_HEIGHT - _MARGIN}" x2="{x:.1f}" '
                     f'y2="{_HEIGHT - _MARGIN + 4}" stroke="#888"/>')
        parts.append(f'<text x="{x:.1f}" y="{_HEIGHT - _MARGIN + 15}" text-anchor="middle">1e{exponent}</text>')
    for exponent in range(y_low, y_high + 1):
        y = py(10.0 ** exponent)
        parts.append(f'<line x1="{_MARGIN - 4}" y1="{y:.1f}" x2="{_MARGIN}" y2="{y:.1f}" stroke="#888"/>')
        parts.append(f'<text x="{_MARGIN - 6}" y="{y + 3:.1f}" text-anchor="end">1e{exponent}</text>')
    for series, color in ((1, "#0969da"), (2, "#e36209")):
        for point in points:
            if point[0] > 0 and point[series] > 0:
                parts.append(f'<circle cx="{px(point[0]):.1f}" cy="{py(point[series]):.1f}" r="2" '
                             f'fill="{color}" fill-opacity="0.55"/>')
    parts.append(f'<text x="{_WIDTH / 2}" y="{_HEIGHT - 8}" text-anchor="middle">|float64 reference|</text>')
    parts.append(f'<text x="12" y="{_HEIGHT / 2}" transform="rotate(-90 12 {_HEIGHT / 2})" '
                 'text-anchor="middle">|error vs float64|</text>')
    parts.append(f'<text x="{_MARGIN}" y="{_MARGIN - 20}">{escape(name)}</text>')
    parts.append(f'<circle cx="{_WIDTH - 150}" cy="{_MARGIN - 10}" r="3" fill="#0969da"/>'
                 f'<text x="{_WIDTH - 144}" y="{_MARGIN - 7}">original</text>'
                 f'<circle cx="{_WIDTH - 80}" cy="{_MARGIN - 10}" r="3" fill="#e36209"/>'
                 f'<text x="{_WIDTH - 74}" y="{_MARGIN - 7}">candidate</text>')
    parts.append("</svg>")
    return "".join(parts)


def _localisation_html(report) -> str:
    """The first bad intermediate value and the worst ones (localize/layerwise.py)."""
    section = getattr(report, "localisation", None)
    if not section:
        return ""
    parts = ['<h2 id="localisation">Intermediate values</h2>']
    first = section.get("first_bad")
    if first:
        parts.append(f'<p>first bad value: <span class="mismatch">{escape(first["description"])}</span></p>')
    parts.append(f"<p>localisation: {escape(str(section.get('status', '')))}; "
                 f"{section.get('checked', 0)} value(s) judged, "
                 f"{section.get('identical_computation', 0)} computed identically, "
                 f"{len(section.get('not_comparable') or {})} not comparable</p>")
    rows = worst_values(section)
    if rows:
        parts.append("<table><tr><th>value</th><th>op</th><th>verdict</th><th>max_abs</th><th>max ulp</th>"
                     "<th>unexplained</th><th>orig err vs f64</th><th>cand err vs f64</th></tr>")
        for row in rows:
            parts.append(
                f'<tr><td class="l">{escape(row["name"])}</td><td class="l">{escape(row["op"])}</td>'
                f'<td class="l {escape(row["verdict"])}">{escape(row["verdict"])}</td>'
                f"<td>{_fmt(row.get('max_abs'))}</td><td>{_fmt(row.get('max_ulp'))}</td>"
                f"<td>{row.get('unexplained', 0)}/{row.get('size', 0)}</td>"
                f"<td>{_fmt(row.get('orig_err_max'))}</td><td>{_fmt(row.get('cand_err_max'))}</td></tr>")
        parts.append("</table>")
    parts += [f"<p>note: {escape(note)}</p>" for note in section.get("notes", [])]
    return "".join(parts)


_HEADER = ("<table><tr><th>output</th><th>verdict</th><th>type</th><th>max_abs</th><th>max_rel</th>"
           "<th>max ulp</th><th>p99 ulp</th><th>differing</th><th>orig err vs f64</th>"
           "<th>cand err vs f64</th><th>reference</th></tr>")


def _output_rows(outputs) -> str:
    rows = []
    for out in outputs:
        comp = out.comparison
        ref_note = out.reference if out.reference != "float64" else ""
        rows.append(
            "<tr>"
            f'<td class="l">{escape(out.name)}</td>'
            f'<td class="l {out.verdict}">{out.verdict}</td>'
            f'<td class="l">{escape(out.dtype)} {escape(str(out.shape))}</td>'
            f"<td>{_fmt(comp.get('max_abs'))}</td><td>{_fmt(comp.get('max_rel'))}</td>"
            f"<td>{_fmt(comp.get('max_ulp'))}</td><td>{_fmt(comp.get('p99_ulp'))}</td>"
            f"<td>{comp.get('differing', out.differing)}/{comp.get('size', 0)}</td>"
            f"<td>{_fmt(out.orig_err_max)}</td><td>{_fmt(out.cand_err_max)}</td>"
            f'<td class="l">{escape(ref_note)}</td>'
            "</tr>")
    return _HEADER + "".join(rows) + "</table>"


def _deployment_html(report) -> str:
    """Both models run the way they will be deployed (onnxruntime's level, providers)."""
    deployed = getattr(report, "deployment", None)
    if not deployed:
        return ""
    settings = (getattr(report, "settings", None) or {}).get("deployment") or {}
    how = f"level {settings.get('level', '?')}, {', '.join(settings.get('providers', []))}"
    return (f'<h2 id="deployment">Deployment: {escape(how)}</h2>'
            "<p>Original and candidate both run under these settings; judged with the same rules.</p>"
            + _output_rows(deployed))


def render_html(report) -> str:
    plots = [f'<div class="plot">{_scatter_svg(out.name, out.scatter)}</div>'
             for out in report.outputs if out.scatter]
    notes = [f"<li>{escape(out.name)}: {escape(note)}</li>" for out in report.outputs for note in out.notes]
    notes += [f"<li>{escape(note)}</li>" for note in report.notes]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>onnxrefine verify</title>"
        f"<style>{_STYLE}</style></head><body>"
        f'<h1>onnxrefine verify</h1><p class="verdict">verdict: '
        f'<span class="{report.verdict}">{report.verdict}</span></p>'
        f"<p>Input sets: {escape(', '.join(report.input_sets))}</p>"
        + _output_rows(report.outputs)
        + _deployment_html(report)
        + _localisation_html(report)
        + ("<h2>Error versus magnitude</h2>" + "".join(plots) if plots else "")
        + ("<h2>Notes</h2><ul class=\"notes\">" + "".join(notes) + "</ul>" if notes else "")
        + "</body></html>\n"
    )


def worst_values(section: dict, count: int = 8) -> list[dict]:
    """The differing values, worst verdict first, then the largest candidate error, then order."""
    severity = {name: index for index, name in enumerate(VERDICTS)}
    rows = [v for v in section.get("values", []) if v.get("differing")]

    def ratio(value):
        cand, orig = value.get("cand_err_max"), value.get("orig_err_max")
        if cand is None:
            return value.get("max_ulp", 0.0)
        return cand / orig if orig else (float("inf") if cand else 0.0)

    rows.sort(key=lambda v: (-severity.get(v["verdict"], 0), -ratio(v), v["order"]))
    return rows[:count]
