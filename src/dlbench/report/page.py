"""The frame of the HTML report: one self-contained page (inline CSS, a few lines of inline
JavaScript for the runs table, inline SVG charts), and the sortable, filterable runs table.

No resource is loaded from anywhere: the page opens offline and can be attached to an e-mail.
"""

from __future__ import annotations

from html import escape
from typing import Any

from dlbench.figure import primary_metric
from dlbench.record import diverged
from dlbench.report.frame import environment, world_size
from dlbench.report.numbers import ms
from dlbench.report.tables import layout_label, metric_text

# Tables fit the window (1400 px and less): a long text cell (class free: tags, images, hosts) may break anywhere,
# so the table narrows to the page rather than scroll; parameters and configurations (class params) break between
# parameters only (a break opportunity after each comma, slash and semicolon: breakable), never inside "seq_len=4";
# short cells (ids, versions), dates (class date) and numbers never break. On paper (and in a print-layout
# screenshot) nothing scrolls inside a box: the boxes grow to their rows, on a landscape page (@media print).
CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:min(1600px,98vw);padding:0 18px 40px;color:#222}
h1{font-size:1.5em;margin:18px 0 4px}h2{font-size:1.2em;margin-top:34px;border-bottom:2px solid #1f77b4;padding-bottom:3px}
h3{font-size:1em;margin:18px 0 6px}nav a{margin-right:12px}.meta{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.82em;margin:6px 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f4f8}td.free{overflow-wrap:anywhere}td.params{overflow-wrap:normal}td.num,td.date,span.date{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.date,span.date{text-align:left}td.num.figure{white-space:normal}.diff{background:#fff3cd}
.method{background:#f6f8fa;border-left:3px solid #888;padding:6px 10px;font-size:.85em;color:#333;margin:8px 0}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:10px}
.slower,.regression{color:#b00020;font-weight:bold}.faster{color:#087f23;font-weight:bold}.changed{background:#fde2e1}
#runs-table th{cursor:pointer;user-select:none}#runs-table th.asc:after{content:' \\25B2'}#runs-table th.desc:after{content:' \\25BC'}
.scroll{max-height:520px;overflow:auto;border:1px solid #ddd}
#runs-table{font-size:.76em}#runs-table td,#runs-table th{padding:3px 4px}
#runs-table td.num,#runs-table td.status summary{white-space:nowrap}#runs-table td.status summary{cursor:pointer}input#filter{padding:4px;width:320px}
.print-only{display:none}svg.chart{cursor:zoom-in}svg.chart.zoomed{position:fixed;left:2vw;top:2vh;width:96vw;height:96vh;background:#fff;
z-index:10;box-shadow:0 0 0 100vmax rgba(0,0,0,.45);cursor:zoom-out}
@page{size:A4 landscape;margin:10mm}
@media print{body{max-width:none;padding:0}.scroll{max-height:none;overflow:visible;border:0}table{font-size:.68em}
#runs-table{font-size:.6em}td details td,td details th{padding:1px 3px}svg.spark{width:100px;height:20px}
tr,svg.chart{break-inside:avoid}input#filter,#runs-table th:after{display:none}.print-only{display:block}
svg.chart.zoomed{position:static;width:auto;height:auto;box-shadow:none}}
"""

# Click a chart to see it full-window (again to close); sort the runs table by a column (numbers
# by data-v, text otherwise) and filter its rows by text. On paper every drill-down (<details>) is open: CSS cannot
# open one, so the page opens the folded ones before printing and folds them again after (beforeprint/afterprint,
# and the print media query for browsers that print without those events); without JavaScript a printed note says
# to open them first (NO_SCRIPT). No library.
JS = """
(function(){var opened=[];
function unfold(){opened=opened.concat(Array.prototype.filter.call(document.querySelectorAll('details:not([open])'),
  function(d){d.open=true;return true;}));}
function fold(){opened.forEach(function(d){d.open=false;});opened=[];}
window.addEventListener('beforeprint',unfold);window.addEventListener('afterprint',fold);
var media=window.matchMedia&&window.matchMedia('print');
if(media&&media.addEventListener)media.addEventListener('change',function(e){if(e.matches)unfold();else fold();});
})();
Array.prototype.forEach.call(document.querySelectorAll('svg.chart'),function(svg){
  svg.addEventListener('click',function(){svg.classList.toggle('zoomed');});});
(function(){
var table=document.getElementById('runs-table');if(!table)return;
var body=table.tBodies[0],heads=table.tHead.rows[0].cells;
function key(row,i){var c=row.cells[i],v=c.getAttribute('data-v');return v!==null?parseFloat(v):c.textContent.toLowerCase();}
Array.prototype.forEach.call(heads,function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('asc');Array.prototype.forEach.call(heads,function(h){h.classList.remove('asc','desc');});
  th.classList.add(asc?'asc':'desc');var rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){var x=key(a,i),y=key(b,i);if(typeof x==='number'&&isNaN(x))return 1;if(typeof y==='number'&&isNaN(y))return -1;
    return (x<y?-1:x>y?1:0)*(asc?1:-1);});
  rows.forEach(function(r){body.appendChild(r);});});});
var input=document.getElementById('filter'),count=document.getElementById('shown');
input.addEventListener('input',function(){var terms=input.value.toLowerCase().split(/\\s+/).filter(Boolean),n=0;
  Array.prototype.forEach.call(body.rows,function(r){var t=r.textContent.toLowerCase();
    var ok=terms.every(function(w){return t.indexOf(w)>=0;});r.style.display=ok?'':'none';if(ok)n++;});
  count.textContent=n;});
})();
"""


#: Printed only where scripts do not run (the drill-downs then print as they are on screen).
NO_SCRIPT = ('<noscript><p class="print-only">Printed without JavaScript: folded drill-downs (▸) print folded; '
             "open the ones you need before printing, or print with scripts allowed.</p></noscript>")


def page(title: str, meta: str, nav: list[tuple[str, str]], body: str) -> str:
    """The whole document."""
    links = "".join(f'<a href="#{anchor}">{escape(label)}</a>' for anchor, label in nav)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        # Nothing may be fetched: the policy makes a stray reference fail loudly instead of leaking a request.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1><p class=\"meta\">{meta}</p>{NO_SCRIPT}<nav>{links}</nav>{body}"
        f"<script>{JS}</script></body></html>\n"
    )


def method(text: str) -> str:
    """A short note on how the section's figures were measured."""
    return f'<div class="method"><b>Method.</b> {text}</div>'


def section(anchor: str, title: str, content: str) -> str:
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>{content}</section>'


#: Characters beyond which a table's text cell may break anywhere (shorter ones break only at spaces).
LONG_CELL = 40


def date_time(iso: str) -> str:
    """``2026-12-06 19:44:54`` (UTC) as two unbreakable parts: it may wrap between the date and the time, never
    inside the date ("2026-" / "12-06")."""
    day, _, time = iso[:19].partition("T")
    return f'<span class="date">{escape(day)}</span>' + (f' <span class="date">{escape(time)}</span>' if time else "")


def breakable(text: str) -> str:
    """Escaped ``text`` with a break opportunity (``<wbr>``) after each comma, slash and semicolon: a long cell wraps
    between parameters ("seq_len=4,<wbr>vocab=64"), never inside one."""
    out = escape(text)
    for mark in (",", "/", ";"):
        out = out.replace(mark, mark + "<wbr>")
    return out


def table(columns: list[str], rows: list[list[Any]], numeric: set[int] = frozenset(), row_class=None) -> str:
    """A plain table; cells are escaped text unless given as ``("html", markup)``; a text cell longer than
    :data:`LONG_CELL` characters may break anywhere (class ``free``), so the table fits the page."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    out = []
    for i, row in enumerate(rows):
        cells = []
        for j, cell in enumerate(row):
            html = isinstance(cell, tuple) and cell[0] == "html"
            text = cell[1] if html else escape("-" if cell is None else str(cell))
            cls = "num" if j in numeric else "free" if len(text) > LONG_CELL else ""
            if cls == "free" and not html:
                text = breakable("-" if cell is None else str(cell))
                if columns[j] == "configuration":  # its parameters break between parameters only
                    cls = "free params"
            cells.append(f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>")
        cls = f' class="{row_class(i)}"' if row_class and row_class(i) else ""
        out.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(out)}</tbody></table>"


def _num(value: float | None, text: str, cls: str = "num") -> str:
    """A number's cell, sorted by ``data-v``; class ``num figure``: a figure and its unit, which may wrap between them."""
    return f'<td class="{cls}" data-v="{"NaN" if value is None else repr(float(value))}">{escape(text)}</td>'


def _params(spec: dict[str, Any]) -> str:
    """The workload's parameters, then the layout of a ``--parallel`` run (runs of one model differ by it alone)."""
    params = " ".join(f"{k}={v}" for k, v in sorted((spec.get("params") or {}).items()) if v is not None)
    layout = layout_label(spec)
    return f"{params} · {layout}" if layout and params else layout or params


def _free(text: Any, cls: str = "free") -> str:
    """A cell of free text (tags, image names) that may break anywhere rather than widen the table; class ``free
    params``: parameters, which break between parameters only."""
    return f'<td class="{cls}">{breakable(str(text))}</td>'


def _preflight_cell(record: dict[str, Any]) -> str:
    """The verdict the run started with (``env.preflight``): the word, coloured as a status is, with its mode and the
    probes' duration; each node's sentence (the probes and figures it rests on) in the tooltip."""
    pre = (record.get("env") or {}).get("preflight")
    if not pre:
        return '<td class="status">-</td>'
    sentence = "; ".join(f"{host}: {node['sentence']}" for host, node in sorted(pre["nodes"].items())) or pre["sentence"]
    took = f", {pre['duration_s']:.1f} s" if pre.get("duration_s") is not None else ""
    return (f'<td class="status" title="{escape(sentence[:1000])}">{escape(pre["verdict"])} '
            f'({escape(pre["mode"])}{took})</td>')


def _status_cell(record: dict[str, Any]) -> str:
    """The status word; a failed or pruned run's reason one click away (and in the tooltip), so that a long
    reason neither wraps the row to many lines nor widens the table."""
    status, error = escape(record["status"]), record.get("error")
    if record["status"] == "ok" and diverged(record):  # the timing stands; the loss went NaN or infinite
        return f'<td class="status" title="its loss went NaN or infinite">{status}, diverged</td>'
    if not error:
        return f'<td class="status">{status}</td>'
    reason = escape(error[:1000])
    return f'<td class="status"><details><summary title="{reason}">{status}</summary><span>{reason}</span></details></td>'


def runs_table(records: list[dict[str, Any]]) -> str:
    """Every selected run, sortable by any column (click a header) and filterable by text."""
    columns = ["id", "created (UTC)", "workload", "parameters", "mode", "prec", "batch", "procs", "threads",
               "device", "status", "figure", "median step ms", "torch", "container", "host", "tags"]
    checked = any((r.get("env") or {}).get("preflight") for r in records)  # the column where a run was preflighted
    if checked:
        columns.insert(columns.index("status") + 1, "preflight")
    rows = []
    for r in records:
        spec, result, env = r["spec"], r.get("result") or {}, environment(r)
        figure = primary_metric(r)  # a node check's iterations/s, a checkpoint's bytes/s: never "samples/s"
        step = (result.get("step_time_s") or {}).get("median") if figure.spread_of == "steps" else None
        rows.append(
            f"<tr><td>{escape(r['id'])}</td><td>{date_time(r['created_at'])}</td>"
            + _free(spec["workload"]) + _free(_params(spec), "free params") + f"<td>{escape(str(spec.get('mode', '')))}</td>"
            f"<td>{escape(str(spec.get('precision', '')))}</td>"
            + _num(spec.get("batch_size"), str(spec.get("batch_size") or "-"))
            + _num(world_size(r), str(world_size(r)))
            + _num(spec.get("threads"), str(spec.get("threads") or "-"))
            + _free(spec.get("device_name") or spec.get("device", "")) + _status_cell(r)
            + (_preflight_cell(r) if checked else "")
            + _num(figure.value, metric_text(figure), "num figure")
            + _num(None if step is None else step * 1e3, ms(step))
            + f"<td>{escape(str(env['torch']))}</td>" + _free(env["container"] + (" " + env["image"] if env["image"] else ""))
            + _free(env["host"]) + _free(" ".join(f"{k}={v}" for k, v in sorted((spec.get("tags") or {}).items())))
            + "</tr>"
        )
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    return (
        f'<p><input id="filter" type="search" placeholder="filter: words that must all appear in a row" '
        f'aria-label="filter runs"> <span id="shown">{len(records)}</span> of {len(records)} runs shown; '
        "click a column header to sort.</p>"
        f'<div class="scroll"><table id="runs-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )
