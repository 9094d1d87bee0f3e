"""A real browser (Debian's Chromium, headless, driven by Playwright) on the page `streamlab serve`
serves at `/`: tokens arrive through EventSource, the text equals /v1/generate's, and after the
connection is cut (Toxiproxy's limit_data closes it after CUT_BYTES) the browser reconnects by
itself with Last-Event-ID and the text is still exact. The screenshot goes to results/browser/."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from harness.live.toxiproxy import ToxiproxyClient, ToxiproxyServer, find_binary
from harness.live.process import ServerProcess
from harness.format.toxics import LimitDataToxic

SHOTS = Path("results") / "browser"
PROMPT = "Return the number of items in the container."
TOKENS = 600
# Each connection is closed after this many bytes from the server: the page (3.6 KB) and about
# 250 of the stream's 600 token events (about 75 KB in all), so every stream is cut mid-way
# by its size, not by a timer racing a stream the one-thread server makes in half a second.
# Each reconnect gets as much again, so the stream ends on its second or third connection.
CUT_BYTES = 40_000


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


pytestmark = [
    pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (Debian: apt-get install chromium; "
                                                  "scripts/dev setup does it as root)"),
    pytest.mark.skipif(find_binary() is None, reason="toxiproxy-server is not installed: run `scripts/dev setup`"),
]


def test_the_page_streams_and_the_browser_resumes_after_a_cut(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    server = ServerProcess(["--model", "tiny", "--resume-window", "10", "--queue-limit", "2000",
                            "--log-level", "warning"])
    asyncio.run(server.start())
    toxiproxy = ToxiproxyServer().start()
    faults = ToxiproxyClient(toxiproxy)
    try:
        proxy = faults.create_proxy("browser", server.port, [LimitDataToxic(type="limit_data", bytes=CUT_BYTES)])
        expected = asyncio.run(_generate(server))
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"], headless=True)
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{proxy.listen_port}/")
                page.fill("#max", str(TOKENS))
                page.click("#go")
                # EventSource retries after each cut after the server's retry: (1 s).
                page.wait_for_function("document.getElementById('finish').textContent !== '-'", timeout=60_000)
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / "page.png"), full_page=True)
                finish = page.text_content("#finish")
                text = page.text_content("#out")
                opens = int(page.text_content("#opens"))
                count = int(page.text_content("#count"))
            finally:
                browser.close()
        assert finish == expected["finish_reason"] and count == len(expected["token_ids"])
        assert opens >= 2, "the browser never reconnected"
        assert text == expected["text"]
        stats = asyncio.run(server.settle())
        assert stats["blocks_free"] == stats["blocks_total"] and stats["streams_registered"] == 0
        assert stats["releases"] == 2  # the /v1/generate reference and the page's one stream, each once
        assert stats["cancellations"]["resume_expired"] == 0
    finally:
        faults.close()
        toxiproxy.stop()
        server.stop()


async def _generate(server: ServerProcess) -> dict:
    ex = await server.request("POST", "/v1/generate", {"prompt": PROMPT, "max_new_tokens": TOKENS,
                                                       "temperature": 0.0, "ignore_eos": False})
    try:
        return await ex.read_json()
    finally:
        ex.close_fin()
