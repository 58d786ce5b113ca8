"""``lsh-spark inspect``: the HTML page of a dedup run, rendered by headless Chromium
(Debian's ``chromium`` package; ``.ci/run`` installs it) and checked on the page's
content, against the run's own outputs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from lsh_spark.commands import inspect
from lsh_spark.config import DedupConfig
from lsh_spark.pipeline import run_dedup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# CI sets this: there the rendering test fails, not skips, when Chromium is missing.
REQUIRE_CHROMIUM = os.environ.get("LSH_SPARK_REQUIRE_CHROMIUM") == "1"


@pytest.fixture(scope="module")
def inspected(spark, tmp_path_factory):
    """A dedup run of the sample, its inspection page and the command's summary."""
    root = tmp_path_factory.mktemp("inspect")
    out = str(root / "dedup")
    run_dedup(spark, SAMPLE, out, DedupConfig())
    page = root / "page.html"
    return out, page, _inspect_summary(spark, out, page)


def _inspect_summary(spark, out, page):
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert inspect([out, "--input", SAMPLE, "--html", str(page)], spark=spark) == 0
    return json.loads(printed.getvalue().strip().splitlines()[-1])


def check_page(markup: str, out: str, spark) -> None:
    """What the page says, against the run's own outputs: the page's source as
    written, or the DOM that Chromium built from it (which quotes attributes
    with double quotes)."""
    assert "<h1>lsh-spark: what was merged in" in markup
    with open(os.path.join(out, "report.json"), encoding="utf-8") as fh:
        report = json.load(fh)
    counts = dict(re.findall(r"<tr><td>(\w+)</td><td>(\d+)</td></tr>", markup))
    assert int(counts["input_records"]) == 411
    assert int(counts["duplicate_clusters"]) == report["counts"]["duplicate_clusters"]
    clusters = re.findall(r"<h3>cluster (.+?): (\d+) documents</h3>", markup)
    sizes = [int(n) for _, n in clusters]
    assert len(clusters) == 10 and sizes == sorted(sizes, reverse=True)
    assert sizes[0] == report["counts"]["largest_cluster"]
    assert "<mark>" in markup  # the words that differ
    shown = re.findall(
        r"kept (\S+?)</p>.*?removed (\S+?) · Jaccard with the kept document "
        r"<b class=[\"']jaccard[\"']>([\d.]+)</b>",
        markup,
        re.S,
    )
    assert len(shown) == 20
    # Each removed document beside the kept one of its cluster, with the exact
    # Jaccard that verification wrote where the two are a verified edge.
    pairs = {
        frozenset((r.id_a, r.id_b)): r.jaccard for r in spark.read.parquet(f"{out}/pairs").collect()
    }
    kept_of = {r.id: r.cluster_id for r in spark.read.parquet(f"{out}/clusters").collect()}
    checked = 0
    for kept, removed, score in shown:
        assert kept_of[removed] == kept_of[kept] and kept != removed
        if frozenset((kept, removed)) in pairs:
            assert abs(float(score) - pairs[frozenset((kept, removed))]) < 1e-3
            checked += 1
    assert checked >= 10
    assert markup.count('src="data:image/png;base64,') == 2  # histogram and S-curve, embedded


@pytest.mark.slow
def test_inspection_page_says_what_the_run_merged(spark, inspected):
    """The page as written, without a browser: this runs wherever the tests do."""
    out, page, summary = inspected
    assert summary["largest_clusters"] == 10 and summary["removed_shown"] == 20
    check_page(page.read_text(encoding="utf-8"), out, spark)


@pytest.mark.slow
def test_inspection_page_renders_in_chromium(spark, inspected, tmp_path):
    if CHROMIUM is None:
        if REQUIRE_CHROMIUM:
            pytest.fail("LSH_SPARK_REQUIRE_CHROMIUM=1 but chromium is not installed")
        pytest.skip("needs chromium (apt-get install -y chromium)")
    out, page, _ = inspected
    check_page(chromium("--dump-dom", page.as_uri()).stdout, out, spark)
    shot = tmp_path / "page.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri())
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 50_000


def test_inspect_refuses_what_is_not_a_dedup_output(spark, tmp_path, capsys):
    (tmp_path / "x").mkdir()
    with pytest.raises(SystemExit) as exit_:
        inspect([str(tmp_path / "x"), "--input", SAMPLE], spark=spark, prog="lsh-spark inspect")
    assert exit_.value.code == 2
    assert "is not a complete dedup output" in capsys.readouterr().err
