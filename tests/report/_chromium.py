"""Drive Debian's headless Chromium over the DevTools protocol (loopback only), for the report test.

``open_page`` starts Chromium with a private profile, loads a file URL, and returns a session that
has recorded console errors, uncaught exceptions and every network request the page made.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path


def find_or_install() -> str | None:
    """The chromium binary; installed with apt-get when missing and allowed (root, apt present)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found or not shutil.which("apt-get"):
        return found
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]):
        if subprocess.run(argv, env=env, capture_output=True, timeout=900).returncode != 0:
            return None
    return shutil.which("chromium")


class Page:
    """One browser tab: send DevTools commands, collect the events that matter."""

    def __init__(self, ws):
        self.ws, self.next_id = ws, 0
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self.loaded = False

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.console_errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.console_errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Page.loadEventFired":
            self.loaded = True

    def send(self, method: str, timeout_s: float = 60.0, **params) -> dict:
        """``method``'s result. Each receive is bounded by the socket's timeout, and the whole wait by
        ``timeout_s``: a page that keeps sending events (a timer logging) must not hide a reply that never comes."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium did not answer {method} within {timeout_s:.0f} s")
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_loaded(self, timeout_s: float = 30.0) -> None:
        self.ws.settimeout(1.0)
        deadline = time.monotonic() + timeout_s
        while not self.loaded and time.monotonic() < deadline:
            try:
                self._event(json.loads(self.ws.recv()))
            except Exception:  # noqa: BLE001 - a recv timeout: keep waiting until the deadline
                pass
        self.ws.settimeout(60.0)
        if not self.loaded:
            raise TimeoutError("the page did not finish loading")

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        """The viewport, or with ``full_page`` the whole document (its content size, beyond the viewport)."""
        params = {"format": "png", "captureBeyondViewport": True}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))


def start(binary: str, profile: Path) -> tuple[subprocess.Popen, str]:
    """Chromium headless on a loopback DevTools port; returns the process and the page's websocket URL."""
    proc = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1280,1600", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("chromium did not open its DevTools port")
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
        targets = json.load(response)
    return proc, next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")


def open_page(binary: str, profile: Path, url: str) -> tuple[subprocess.Popen, Page]:
    """Start Chromium, enable the domains we watch, load ``url`` and wait for its load event."""
    import websocket  # websocket-client, a test dependency

    proc, ws_url = start(binary, profile)
    try:
        page = Page(websocket.create_connection(ws_url, timeout=60, suppress_origin=True))
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.send("Page.navigate", url=url)
        page.wait_loaded()
    except BaseException:  # the caller's cleanup never sees this process: end it here, not with the session
        proc.kill()
        proc.wait(timeout=30)
        raise
    return proc, page
