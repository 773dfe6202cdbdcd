"""The ``newsmotion`` command: one module per command group, assembled here.

Examples::

    newsmotion loops list
    newsmotion guidance build --all
    newsmotion guidance extract my_take.mp4 --loop-id weather_point
    newsmotion caches --json
    newsmotion model check /models/Wan2.2-Animate-14B-Diffusers
    newsmotion bench guidance --json benchmarks/results/guidance.json

Errors the user can fix (bad input, bad cache) print as one ``error:`` line and exit 1.
The CLI is an edge of the program: each command decides the storage root once
(``Storage.from_env()``: ``$NEWSMOTION_STORAGE``, else ``./storage``) and passes it down.
"""

from __future__ import annotations

import typer

from newsmotion_engine.cli import bench, caches, calibrate, guidance, lips, loops, model, persona, render, scorecard, speech, story, studio

app = typer.Typer(help="newsmotion: gesture-loop presenter clips from an anchor's portrait.", no_args_is_help=True)
# Groups and commands in the order `newsmotion --help` lists them.
app.add_typer(loops.loops_app, name="loops")
app.add_typer(guidance.guidance_app, name="guidance")
app.add_typer(calibrate.calibrate_app, name="calibrate")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(persona.persona_app, name="persona")
app.add_typer(speech.speech_app, name="speech")
app.add_typer(story.story_app, name="story")
app.add_typer(studio.studio_app, name="studio")
app.add_typer(model.model_app, name="model")
app.command("caches")(caches.caches)
app.command("render")(render.render_cmd)
app.command("lips")(lips.lips_cmd)
app.command("backends")(render.backends_cmd)
app.command("scorecard")(scorecard.scorecard_cmd)
