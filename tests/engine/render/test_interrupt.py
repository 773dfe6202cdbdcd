"""A render interrupted mid-clip (Ctrl-C twice, as a terminal sends it to the whole process group)
leaves no temporary or partial file, and the previous clip and its telemetry stay as they were."""

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.job import render_persona_loop

REPO = Path(__file__).resolve().parents[3]
SPEC = {"width": 360, "height": 640}

# The child renders the same clip again (force) and says when it is half-way; it slows down there
# so the signals land while frames are in flight.
CHILD = """
import signal, sys, time
# A job started in the background by a shell without job control inherits SIGINT ignored (and
# Python then installs no KeyboardInterrupt handler); a terminal's job has the default. Be that job.
signal.signal(signal.SIGINT, signal.default_int_handler)
from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.job import render_persona_loop
from newsmotion_engine.storage import Storage

def progress(done, total):
    if done == total // 2:
        print("MIDCLIP", flush=True)
    if done >= total // 2:
        time.sleep(0.02)

backend = get_backend("warp"); backend.load()
render_persona_loop(Storage(sys.argv[1]), "anchor", "nod", backend, RenderSpec(width=360, height=640), force=True, progress=progress)
print("FINISHED", flush=True)
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("gap_s", [0.0, 0.005, 0.05])
def test_two_interrupts_mid_clip_leave_no_temp_file_and_the_previous_clip(gap_s, astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    ensure_guidance(storage, "nod")
    ensure_persona(storage, "anchor")
    backend = get_backend("warp")
    backend.load()
    first = render_persona_loop(storage, "anchor", "nod", backend, RenderSpec(**SPEC))
    mp4 = Path(first.output)
    before = {p.name: _sha(p) for p in (mp4, mp4.with_suffix(".json"))}

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(storage.root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own process group, like a job in a terminal
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "MIDCLIP"
        temps = [p for p in mp4.parent.iterdir() if p.name.endswith(".tmp.mp4")]
        assert len(temps) == 1 and temps[0].stat().st_size > 0  # ffmpeg is writing the new clip
        os.killpg(child.pid, signal.SIGINT)  # the whole group: ffmpeg too, were it in it
        time.sleep(gap_s)
        try:
            os.killpg(child.pid, signal.SIGINT)
        except ProcessLookupError:
            pass  # already gone
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert "FINISHED" not in out and child.returncode != 0, err
    assert "KeyboardInterrupt" in err
    left = sorted(p.name for p in mp4.parent.iterdir())
    assert left == [".warp.mp4.lock", "warp.json", "warp.mp4"], left  # no temp, no partial file
    assert {p.name: _sha(p) for p in (mp4, mp4.with_suffix(".json"))} == before
    # No ffmpeg of the child survives (it was in its own process group, so look for its output).
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(mp4.parent) not in ps
