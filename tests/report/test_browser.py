"""The report in a real browser (Debian's headless Chromium): it renders without console errors,
every chart drew something, the runs table sorts and filters, and the page requests nothing.

Chromium is installed with apt-get when missing (``.ci/run`` installs it); the test is skipped only
when that is impossible. The screenshot is kept: in $DLBENCH_TEST_ARTIFACTS when set, else in the
test's temporary folder (its path is printed).
"""

import os
from pathlib import Path

import pytest
from _chromium import find_or_install, open_page

from dlbench.cli.app import main

#: On the worker that builds ``real_db`` (tests/conftest.py's group would be ``chromium``, the first heavy fixture
#: named): most of these tests read ``report_db``, made from ``real_db``, whose two-rank runs a second worker would
#: make again (15–20 s of both cores).
pytestmark = pytest.mark.xdist_group("real_db")

CHARTS = """Array.from(document.querySelectorAll('svg.chart')).map(function(svg){
  var marks=Array.from(svg.querySelectorAll('.mark')).filter(function(m){var b=m.getBBox();return b.width>0||b.height>0;});
  var r=svg.getBoundingClientRect();return {title:svg.querySelector('title').textContent,marks:marks.length,w:r.width,h:r.height};})"""
COLUMN = """(function(name){var t=document.getElementById('runs-table'),i=Array.from(t.tHead.rows[0].cells).findIndex(
  function(c){return c.textContent.trim()===name;});return Array.from(t.tBodies[0].rows).map(function(r){
  var c=r.cells[i];return c.hasAttribute('data-v')?parseFloat(c.getAttribute('data-v')):c.textContent;});})"""
CLICK = """(function(name){Array.from(document.getElementById('runs-table').tHead.rows[0].cells).find(
  function(c){return c.textContent.trim()===name;}).click();return true;})"""


@pytest.fixture(scope="module")
def chromium():
    binary = find_or_install()
    if binary is None:
        pytest.skip("Debian's chromium is not installed and apt-get could not install it (no root or no package source)")
    return binary


@pytest.fixture
def browser_page(chromium, report_db, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", "--db", report_db, "--out", str(out), "--compare", "torch=2.4 vs torch=2.5"]) == 0
    proc, page = open_page(chromium, tmp_path / "profile", out.as_uri())
    try:
        yield out, page
    finally:
        page.ws.close()
        proc.terminate()
        proc.wait(timeout=30)


def _sorted_numbers(values, reverse=False):
    """Numbers in order, then the cells without a value (NaN arrives as None) at the end."""
    numbers = [v for v in values if v is not None]
    return numbers == sorted(numbers, reverse=reverse) and values[len(numbers):] == [None] * (len(values) - len(numbers))


def test_report_renders_in_chromium(browser_page, tmp_path):
    out, page = browser_page
    charts = page.evaluate(CHARTS)
    assert len(charts) >= 8
    empty = [c["title"] for c in charts if c["marks"] == 0 or c["w"] < 100 or c["h"] < 50]
    assert empty == [], f"charts that drew nothing: {empty}"

    zoom = "(function(){var s=document.querySelector('svg.chart');s.dispatchEvent(new MouseEvent('click'));return s.getBoundingClientRect().width;})()"
    assert page.evaluate(zoom) > 1.5 * charts[0]["w"]  # click: full window
    assert page.evaluate(zoom) == pytest.approx(charts[0]["w"], abs=1)  # click again: back in place

    page.evaluate(f"{CLICK}('figure')")
    ascending = page.evaluate(f"{COLUMN}('figure')")
    page.evaluate(f"{CLICK}('figure')")
    descending = page.evaluate(f"{COLUMN}('figure')")
    assert _sorted_numbers(ascending) and _sorted_numbers(descending, reverse=True)
    assert ascending != descending
    page.evaluate(f"{CLICK}('workload')")
    workloads = page.evaluate(f"{COLUMN}('workload')")
    assert workloads == sorted(workloads, key=str.lower)

    shown = page.evaluate("""(function(){var f=document.getElementById('filter');f.value='comm/all_reduce';
      f.dispatchEvent(new Event('input'));return [document.getElementById('shown').textContent,
      Array.from(document.querySelectorAll('#runs-table tbody tr')).filter(function(r){return r.style.display!=='none';}).length];})()""")
    assert shown == ["1", 1]

    shot = Path(os.environ.get("DLBENCH_TEST_ARTIFACTS", tmp_path)) / "report-screenshot.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.evaluate("document.getElementById('filter').value='';document.getElementById('filter').dispatchEvent(new Event('input'));")
    page.screenshot(shot)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")

    assert page.console_errors == []
    assert [u for u in page.requests if u != out.as_uri()] == []


def test_a_stray_network_reference_would_be_caught(chromium, tmp_path):
    """The checks above can fail: a page that loads an image from another host shows a request
    and a console error (blocked by the report's content policy)."""
    from dlbench.report.page import page as make_page

    out = tmp_path / "stray.html"
    out.write_text(make_page("t", "m", [], '<img src="http://192.0.2.1/x.png">'))
    proc, page = open_page(chromium, tmp_path / "profile", out.as_uri())
    try:
        page.evaluate("new Promise(function(r){setTimeout(r,300);})")
        assert page.console_errors  # the CSP violation is reported on the console
    finally:
        page.ws.close()
        proc.terminate()
        proc.wait(timeout=30)



#: Every table wider than the box it sits in or than the window (a horizontal scroll): its section, width, box.
WIDE_TABLES = """Array.from(document.querySelectorAll('table')).filter(function(t){return t.checkVisibility();}).map(function(t){
  var s=t.closest('section'),box=t.closest('.scroll')||(s||document.body);
  return {section:s?s.id:'',head:Array.from(t.tHead?t.tHead.rows[0].cells:[]).map(function(c){return c.textContent;}).join('|'),
    width:Math.ceil(t.getBoundingClientRect().width),box:box.clientWidth,window:document.documentElement.clientWidth};
  }).filter(function(t){return t.width>t.box||t.width>t.window;})"""


#: The runs table in its page: its width beside its box's, and the lines of visible text of its tallest status cell.
RUNS_LAYOUT = """(function(){var t=document.getElementById('runs-table'),box=t.parentElement,
  i=Array.from(t.tHead.rows[0].cells).findIndex(function(c){return c.textContent.trim()==='status';});
  function lines(cell){var tops=new Set(),walk=document.createTreeWalker(cell,NodeFilter.SHOW_TEXT),node;
    while((node=walk.nextNode())){if(!node.parentElement.checkVisibility())continue;var range=document.createRange();
      range.selectNodeContents(node);Array.from(range.getClientRects()).forEach(function(b){if(b.height>0)tops.add(Math.round(b.top));});}
    return tops.size;}
  var counts=Array.from(t.tBodies[0].rows).map(function(r){return lines(r.cells[i]);});
  return {table:t.scrollWidth,box:box.clientWidth,status_lines:Math.max.apply(null,counts),rows:counts.length};})()"""
PRUNED_WHY = "pruned by the median pruner after step 3 (value 1234.5): below the median of the 6 trials before it"


def test_runs_table_fits_1400px_and_a_pruned_trial_keeps_its_status_short(chromium, report_db, tmp_path):
    from _report_runs import stored, variant

    from dlbench.store import RunFilter, open_store

    db = str(tmp_path / "runs.db")
    store = open_store(db)
    try:
        for record in stored(report_db):
            store.save(record)
        pruned = variant(stored(report_db, RunFilter(workloads=("lstm",)))[0], tags={"hpo_study": "s1", "hpo_trial": "7"})
        pruned["status"], pruned["error"] = "pruned", PRUNED_WHY
        store.save(pruned)
        # a configuration as long as an llm one's (its parameters in one unbroken bracket): the throughput
        # table was wider than the page for it, with "median step ms" past the right edge
        long = variant(stored(report_db, RunFilter(workloads=("lstm",)))[0], factor=0.0004)
        long["spec"]["params"] |= {f"{name}_dimension": 4 for name in ("embedding", "hidden", "head", "kv_head", "ffn")}
        store.save(long)
    finally:
        store.close()
    out = tmp_path / "report.html"
    assert main(["report", "--db", db, "--out", str(out)]) == 0
    proc, page = open_page(chromium, tmp_path / "profile", out.as_uri())
    try:
        page.send("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        layout = page.evaluate(RUNS_LAYOUT)
        assert layout["rows"] >= 10
        assert layout["status_lines"] == 1, layout  # the status word; the reason one click away
        assert layout["table"] <= layout["box"], layout  # no horizontal scrolling at 1400 px
        assert page.evaluate("document.querySelector('#runs-table td.status summary').title") == PRUNED_WHY
        assert page.evaluate(WIDE_TABLES) == []  # every table of the page fits 1400 px, not only the runs table
    finally:
        page.ws.close()
        proc.terminate()
        proc.wait(timeout=30)


#: Every table row the page holds that a box around it cuts off (an ancestor that scrolls or hides what overflows
#: it, and does not reach to the row's bottom), and the number of rows of each table.
CLIPPED_ROWS = """(function(){var clipped=[],sizes=[];
  Array.from(document.querySelectorAll('table')).forEach(function(t,k){var rows=Array.from(t.tBodies[0]?t.tBodies[0].rows:[]);
    if(!t.checkVisibility())return;sizes.push(rows.length);
    rows.forEach(function(r,i){var b=r.getBoundingClientRect();
      for(var el=t.parentElement;el&&el!==document.body;el=el.parentElement){var style=getComputedStyle(el);
        if(style.overflowY==='visible')continue;var box=el.getBoundingClientRect();
        if(b.bottom>box.bottom+1||b.top<box.top-1){clipped.push({table:t.id||k,row:i});break;}}});});
  return {clipped:clipped,largest:Math.max.apply(null,sizes),bottom:Math.max.apply(null,Array.from(
    document.querySelectorAll('tr')).map(function(r){return r.getBoundingClientRect().bottom+window.scrollY;}))};})()"""
#: Words (between spaces, commas, slashes and semicolons) of dates and parameter cells that run over two lines.
BROKEN_WORDS = """(function(){var broken=[];
  Array.from(document.querySelectorAll('span.date, td.params')).forEach(function(cell){
    var walk=document.createTreeWalker(cell,NodeFilter.SHOW_TEXT),node;
    while((node=walk.nextNode())){if(!node.parentElement.checkVisibility())continue;var re=/[^\\s,\\/;]+/g,m;
      while((m=re.exec(node.data))){var range=document.createRange();range.setStart(node,m.index);range.setEnd(node,m.index+m[0].length);
        var tops=new Set(Array.from(range.getClientRects()).filter(function(b){return b.width>0;}).map(function(b){return Math.round(b.top);}));
        if(tops.size>1)broken.push(m[0]);}}});
  return broken;})()"""


#: The drill-downs (<details>) of the page that are folded.
FOLDED = "document.querySelectorAll('details:not([open])').length"
#: Whether a condition (a JavaScript expression) holds within 10 s: the browser tells the page that the medium
#: changed (a media query's event) in a later task, not at once.
WITHIN = """(function(test){return new Promise(function(done){var start=Date.now();(function check(){var held=test();
  if(held||Date.now()-start>10000)done(held);else setTimeout(check,20);})();});})(function(){return %s;})"""
#: Notes how many drill-downs are folded as printing starts (after the page's own beforeprint handler).
WATCH_PRINT = """(function(){window.seen=[];window.addEventListener('beforeprint',function(){window.seen.push(
  document.querySelectorAll('details:not([open])').length);});return true;})()"""


def test_the_printed_report_shows_every_row_and_breaks_no_date_or_parameter(chromium, report_db, tmp_path):
    """In print layout (and its full-page screenshot) no box scrolls: the rows beyond the 7th of a long table are on
    the page (a scroll box of 520 px showed 5-7 rows on paper), every drill-down is open (and folds again on screen),
    every table fits the sheet's width, and dates and parameters wrap between words only."""
    out = tmp_path / "report.html"
    assert main(["report", "--db", report_db, "--out", str(out)]) == 0
    proc, page = open_page(chromium, tmp_path / "profile", out.as_uri())
    try:
        on_screen = page.evaluate(CLIPPED_ROWS)
        assert on_screen["largest"] > 7 and any(c["row"] >= 7 for c in on_screen["clipped"]), on_screen  # can fail
        folded = page.evaluate(FOLDED)
        assert folded > 0  # each configuration's newest runs: folded on screen
        # a landscape sheet of A4 at 96 px per inch, less its 10 mm margins (the report's @page): about 1050 px wide
        page.send("Emulation.setDeviceMetricsOverride", width=1050, height=740, deviceScaleFactor=1, mobile=False)
        page.send("Emulation.setEmulatedMedia", media="print")
        assert page.evaluate(WITHIN % f"{FOLDED} === 0")  # on paper every drill-down is open, its rows among those checked below
        printed = page.evaluate(CLIPPED_ROWS)
        assert printed["clipped"] == [], printed["clipped"][:5]
        assert page.evaluate(WIDE_TABLES) == []  # and no column runs off the sheet's right edge
        assert page.evaluate(BROKEN_WORDS) == []
        shot = Path(os.environ.get("DLBENCH_TEST_ARTIFACTS", tmp_path)) / "report-print.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(shot, full_page=True)
        height = int.from_bytes(shot.read_bytes()[20:24], "big")  # the PNG's IHDR height
        assert height >= printed["bottom"] > 1000, (height, printed["bottom"])  # the last row is in the picture
        print(f"screenshot: {shot}")
        page.send("Emulation.setEmulatedMedia", media="")
        assert page.evaluate(WITHIN % f"{FOLDED} === {folded}")  # back on screen: folded as they were
        # the print events alone (browsers whose print media query does not fire): unfolded, then folded as they were
        assert page.evaluate(f"window.dispatchEvent(new Event('beforeprint')), {FOLDED}") == 0
        assert page.evaluate(f"window.dispatchEvent(new Event('afterprint')), {FOLDED}") == folded
        # printing itself (as the print dialog does, not an emulated medium): open as it prints, folded again after
        page.evaluate(WATCH_PRINT)
        assert len(page.send("Page.printToPDF", landscape=True)["data"]) > 1000
        assert page.evaluate("window.seen") == [0]
        assert page.evaluate(WITHIN % f"{FOLDED} === {folded}")
        # without JavaScript the drill-downs print folded, and the printed page says so (on screen it does not)
        page.send("Emulation.setScriptExecutionDisabled", value=True)
        page.loaded = False
        page.send("Page.reload")
        page.wait_loaded()
        page.send("Emulation.setEmulatedMedia", media="print")
        note = "Array.from(document.querySelectorAll('.print-only')).filter(function(p){return p.checkVisibility();}).length"
        assert page.evaluate(note) == 1 and page.evaluate(FOLDED) == folded
        page.send("Emulation.setEmulatedMedia", media="")
        assert page.evaluate(WITHIN % f"{note} === 0")
    finally:
        page.ws.close()
        proc.terminate()
        proc.wait(timeout=30)
