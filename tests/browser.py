"""Debian's headless Chromium driven over the DevTools protocol, for the dashboard's browser tests
and the screenshots in docs/ (``tests/admin/screenshots.py``).

The browser runs in a session and process group of its own, and is ended by ending that whole
group: Debian's ``chromium-headless-shell`` is a shell script that runs the real browser as a
child, so terminating the process we started left the browser and its helpers running (about 7
processes per test run).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import connect
from websockets.sync.connection import Connection

BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")
#: CSS pixels of the two layouts the dashboard must work at.
DESKTOP = (1280, 900)
PHONE = (390, 844)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        state, process_group = fields[0], int(fields[2])
        if process_group == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def end_group(pgid: int, grace: float = 10.0) -> None:
    """SIGTERM to the whole group, then SIGKILL to whatever is left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_members(pgid):
            return


class Page:
    """One tab: commands, JavaScript evaluation, waiting for the DOM, keyboard input, screenshots."""

    def __init__(self, ws: Connection) -> None:
        self.ws = ws
        self.counter = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=True)
        self.send("Runtime.enable", session=True)

    def send(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> Any:
        self.counter += 1
        message: dict[str, Any] = {"id": self.counter, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=30))
            if reply.get("id") == self.counter:
                assert "error" not in reply, reply
                return reply.get("result", {})
            self.events.append(reply)

    def js(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, True
        )
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait(self, expression: str, seconds: float = 15) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        status = self.js("document.getElementById('status')?.textContent")
        raise AssertionError(f"timed out waiting for {expression}; status: {status!r}")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, True)
        self.wait("document.readyState === 'complete' && document.body.dataset.ready !== undefined")

    def viewport(self, size: tuple[int, int]) -> None:
        width, height = size
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
            True,
        )

    def key(self, key: str, code: str | None = None, text: str | None = None, modifiers: int = 0) -> None:
        """One key press as the keyboard sends it (Tab, Enter, Escape, or a character)."""
        codes = {"Tab": 9, "Enter": 13, "Escape": 27, " ": 32}
        base: dict[str, Any] = {
            "key": key,
            "code": code or key,
            "windowsVirtualKeyCode": codes.get(key, 0),
            "modifiers": modifiers,
        }
        # Enter acts (submits a form, follows a link) through the character it types.
        if text is None and key == "Enter":
            text = "\r"
        if text is not None:
            base["text"] = base["unmodifiedText"] = text
        self.send("Input.dispatchKeyEvent", {"type": "keyDown", **base}, True)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **base}, True)

    def type(self, text: str) -> None:
        self.send("Input.insertText", {"text": text}, True)

    def focused(self) -> str:
        """What has the keyboard focus, as ``tag#id`` or ``tag:text``."""
        return str(
            self.js(
                "(() => { const a = document.activeElement; if (!a) return '';"
                " return a.tagName.toLowerCase() + (a.id ? '#' + a.id : ':' + a.textContent.trim()); })()"
            )
        )

    def tab_to(self, target: str, limit: int = 80) -> None:
        """Press Tab until ``target`` (as ``focused`` names it) has the focus."""
        for _ in range(limit):
            if self.focused() == target:
                return
            self.key("Tab")
        raise AssertionError(f"Tab never reached {target}; focus is on {self.focused()}")

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            metrics = self.send("Page.getLayoutMetrics", session=True)
            size = metrics["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", params, True)["data"]
        path.write_bytes(base64.b64decode(data))

    def allow_downloads(self, folder: Path) -> None:
        self.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})


@contextmanager
def chromium(profile: Path) -> Iterator[tuple[Page, int]]:
    """A headless Chromium and one page; yields the page and the browser's process group id."""
    assert BROWSER is not None, "no Chromium: apt-get install chromium-headless-shell"
    log = (profile.parent / f"{profile.name}-chromium.log").open("wb")
    process = subprocess.Popen(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=log,
        stderr=log,  # a file, never a pipe nobody reads (a full pipe would stall the browser)
        start_new_session=True,  # a group of its own: the wrapper, the browser and its helpers
    )
    pgid = process.pid
    try:
        # Chromium writes its DevTools port and browser path here once it listens.
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.exists() and len(active.read_text().split()) >= 2):
            assert process.poll() is None and time.monotonic() < deadline, "Chromium did not start"
            time.sleep(0.05)
        port, path = active.read_text().split()[:2]
        url = f"ws://127.0.0.1:{port}{path}"
        with connect(url, max_size=None) as ws:
            yield Page(ws), pgid
    finally:
        end_group(pgid)
        process.wait(timeout=5)
        log.close()
