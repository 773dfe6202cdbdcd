// newsmotion studio: vanilla JS, no dependencies. Each page embeds its data as JSON
// (<script id="studio-data">), so the site also works from file://.
"use strict";

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const dataNode = document.getElementById("studio-data");
  const data = dataNode ? JSON.parse(dataNode.textContent) : null;
  const page = document.body.dataset.page;

  // play() rejects when a pause interrupts it; that is not an error worth a console line.
  const play = (v) => { const p = v.play(); if (p && p.catch) p.catch(() => {}); };

  // ------------------------------------------------------------------ frame clock
  function Clock(fps, frames) {
    this.fps = fps || 30;
    this.frames = Math.max(1, frames || 1);
  }
  Clock.prototype.frameOf = function (t) { return Math.max(0, Math.min(this.frames - 1, Math.floor(t * this.fps + 1e-4))); };
  // The middle of frame i: a seek there shows frame i whatever the rounding of timestamps.
  Clock.prototype.timeOf = function (i) { return (Math.max(0, Math.min(this.frames - 1, i)) + 0.5) / this.fps; };

  // Transport controls shared by the render and A/B pages. `master` drives the clock; `onFrame`
  // is called with the shown frame index whenever it changes or a seek lands.
  function transport(master, clock, onFrame, setAll) {
    const btn = $("#play"), scrub = $("#scrub"), label = $("#frameno");
    let last = -1;
    const show = (i) => {
      if (scrub) scrub.value = String(i);
      if (label) label.textContent = `${i + 1} / ${clock.frames}`;
      if (i !== last) { last = i; onFrame(i); }
    };
    const seek = (i) => { setAll((v) => { v.pause(); v.currentTime = clock.timeOf(i); }); show(i); };
    btn.addEventListener("click", () => {
      if (master.paused) { setAll((v) => play(v)); } else { setAll((v) => v.pause()); }
    });
    master.addEventListener("play", () => { btn.textContent = "Pause"; });
    master.addEventListener("pause", () => { btn.textContent = "Play"; });
    $("#prev").addEventListener("click", () => seek(clock.frameOf(master.currentTime) - 1));
    $("#next").addEventListener("click", () => seek(clock.frameOf(master.currentTime) + 1));
    scrub.addEventListener("input", () => seek(parseInt(scrub.value, 10)));
    document.addEventListener("keydown", (e) => {
      if (e.target && (e.target.tagName === "INPUT" && e.target.type !== "range")) return;
      if (e.key === "ArrowLeft") { e.preventDefault(); seek(clock.frameOf(master.currentTime) - 1); }
      if (e.key === "ArrowRight") { e.preventDefault(); seek(clock.frameOf(master.currentTime) + 1); }
      if (e.key === " ") { e.preventDefault(); btn.click(); }
    });
    master.addEventListener("seeked", () => show(clock.frameOf(master.currentTime)));
    const tick = () => { show(clock.frameOf(master.currentTime)); requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    return { seek, show };
  }

  // ------------------------------------------------------------------ pose drawing
  // The skeleton of guidance/draw.py, from its exported style (pose_style()): OpenPose-18 body
  // limbs as 60 % opaque ellipses with solid joints, hand bones on the hue circle with blue dots,
  // white face dots; sizes scale with min(width, height) / ref_size.
  function drawPose(ctx, flat, w, h, style) {
    ctx.clearRect(0, 0, w, h);
    if (!flat) return;
    const s = Math.min(w, h) / style.ref_size, z = style.sizes;
    const size = (v) => Math.max(1, Math.round(v * s));
    const stick = size(z.limb_half_width), bodyR = size(z.body_radius), handLine = size(z.hand_line);
    const handR = size(z.hand_radius), faceR = size(z.face_radius), thr = style.conf_threshold;
    const pt = (i) => [flat[3 * i] * w, flat[3 * i + 1] * h, flat[3 * i + 2] >= thr && flat[3 * i + 2] > 0];
    const rgb = (c, a) => `rgba(${c[0]},${c[1]},${c[2]},${a === undefined ? 1 : a})`;
    const dot = (x, y, r, c) => { ctx.beginPath(); ctx.arc(x, y, r, 0, 2 * Math.PI); ctx.fillStyle = rgb(c); ctx.fill(); };
    // OpenPose body; index -1 is the neck (mid-shoulders, present only with both shoulders).
    const ls = pt(5), rs = pt(6);
    const body = style.openpose_from_coco.map((i) => (i < 0 ? [(ls[0] + rs[0]) / 2, (ls[1] + rs[1]) / 2, ls[2] && rs[2]] : pt(i)));
    style.limbs.forEach(([a, b], k) => {
      const p = body[a], q = body[b];
      if (!(p[2] && q[2])) return;
      const len = Math.hypot(q[0] - p[0], q[1] - p[1]);
      ctx.beginPath();
      ctx.ellipse((p[0] + q[0]) / 2, (p[1] + q[1]) / 2, Math.max(len / 2, 0.5), stick, Math.atan2(q[1] - p[1], q[0] - p[0]), 0, 2 * Math.PI);
      ctx.fillStyle = rgb(style.colors[k], style.limb_opacity);
      ctx.fill();
    });
    body.forEach((p, j) => { if (p[2]) dot(p[0], p[1], bodyR, style.colors[j]); });
    style.hand_starts.forEach((start) => {
      const hand = Array.from({ length: 21 }, (_, i) => pt(start + i));
      ctx.lineWidth = handLine;
      style.hand_edges.forEach(([a, b], e) => {
        if (!(hand[a][2] && hand[b][2])) return;
        ctx.beginPath(); ctx.moveTo(hand[a][0], hand[a][1]); ctx.lineTo(hand[b][0], hand[b][1]);
        ctx.strokeStyle = rgb(style.hand_colors[e]); ctx.stroke();
      });
      hand.forEach((p) => { if (p[2]) dot(p[0], p[1], handR, style.hand_dot); });
    });
    for (let i = style.face[0]; i < style.face[1]; i++) { const p = pt(i); if (p[2]) dot(p[0], p[1], faceR, style.face_dot); }
  }

  // ------------------------------------------------------------------ line plots (inline SVG)
  const NS = "http://www.w3.org/2000/svg";
  const el = (name, attrs, parent) => {
    const n = document.createElementNS(NS, name);
    Object.entries(attrs || {}).forEach(([k, v]) => n.setAttribute(k, v));
    if (parent) parent.appendChild(n);
    return n;
  };

  // series: [{name, color, values: [number|null]}]; returns {setFrame(i)}; click -> onSeek(i).
  function linePlot(host, title, series, frames, onSeek) {
    const head = document.createElement("div");
    head.className = "ptitle";
    head.innerHTML = `<span>${title}</span>`;
    series.forEach((s) => { head.insertAdjacentHTML("beforeend", `<span class="key"><span class="sw" style="background:${s.color}"></span>${s.name}</span>`); });
    host.appendChild(head);
    const all = series.flatMap((s) => s.values.filter((v) => v !== null && Number.isFinite(v)));
    if (!all.length) {
      host.insertAdjacentHTML("beforeend", `<div class="empty">no values (see the notes above)</div>`);
      return { setFrame() {} };
    }
    const W = 600, H = 120, L = 40, R = 8, T = 8, B = 18;
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" }, host);
    let lo = Math.min(...all), hi = Math.max(...all);
    if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
    const pad = (hi - lo) * 0.08; lo -= pad; hi += pad;
    const x = (i) => L + (frames > 1 ? (i / (frames - 1)) : 0.5) * (W - L - R);
    const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    for (let k = 0; k <= 3; k++) {
      const v = lo + (k / 3) * (hi - lo);
      el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#2a2f3a", "stroke-width": 1, "vector-effect": "non-scaling-stroke" }, svg);
      const t = el("text", { x: L - 4, y: y(v) + 3, "text-anchor": "end", fill: "#9aa3b2", "font-size": 9 }, svg);
      t.textContent = Math.abs(hi) >= 10 ? v.toFixed(1) : v.toFixed(3);
    }
    series.forEach((s) => {
      let d = "", pen = false;
      s.values.forEach((v, i) => {
        if (v === null || !Number.isFinite(v)) { pen = false; return; }
        d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`; pen = true;
      });
      el("path", { d, fill: "none", stroke: s.color, "stroke-width": 1.6, "vector-effect": "non-scaling-stroke" }, svg);
    });
    const head2 = el("line", { x1: x(0), x2: x(0), y1: T, y2: H - B, stroke: "#ffffff", "stroke-width": 1, "vector-effect": "non-scaling-stroke" }, svg);
    const lab = el("text", { x: W - R, y: H - 4, "text-anchor": "end", fill: "#e6e8ee", "font-size": 9 }, svg);
    svg.addEventListener("click", (e) => {
      const r = svg.getBoundingClientRect();
      const fx = ((e.clientX - r.left) / r.width) * W;
      onSeek(Math.round(((fx - L) / (W - L - R)) * (frames - 1)));
    });
    return {
      setFrame(i) {
        head2.setAttribute("x1", x(i)); head2.setAttribute("x2", x(i));
        lab.textContent = `frame ${i + 1}: ` + series.map((s) => (s.values[i] === null || s.values[i] === undefined ? "-" : Number(s.values[i]).toFixed(3))).join(" · ");
      },
    };
  }

  // ------------------------------------------------------------------ pages
  function indexPage() {
    const chips = $$("#backend-filter .chip");
    const apply = () => {
      const on = new Set(chips.filter((c) => c.classList.contains("on")).map((c) => c.dataset.backend));
      let shown = 0;
      $$(".card[data-backend]").forEach((card) => {
        const vis = on.has(card.dataset.backend);
        card.style.display = vis ? "" : "none";
        shown += vis ? 1 : 0;
      });
      const count = $("#render-count");
      if (count) count.textContent = String(shown);
    };
    chips.forEach((c) => c.addEventListener("click", () => { c.classList.toggle("on"); apply(); }));
    // Hover a card to play its clip in place of the thumbnail.
    $$(".card").forEach((card) => {
      const preview = $(".preview", card);
      if (!preview) return;
      let video = null;
      card.addEventListener("mouseenter", () => {
        video = document.createElement("video");
        Object.assign(video, { src: preview.dataset.src, muted: true, loop: true, playsInline: true });
        $(".thumb", card).appendChild(video);
        play(video);
      });
      card.addEventListener("mouseleave", () => { if (video) { video.pause(); video.remove(); video = null; } });
    });
  }

  function renderPage() {
    const video = $("#clip");
    if (!video || !data) return;
    const clock = new Clock(data.fps, data.frames);
    const canvas = $("#overlay"), toggle = $("#skeleton"), ctx = canvas.getContext("2d");
    let frame = 0;
    const redraw = () => {
      if (!toggle.checked || !data.keypoints) return;
      const w = video.videoWidth || 720, h = video.videoHeight || 1280;
      if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
      drawPose(ctx, data.keypoints[Math.min(frame, data.keypoints.length - 1)], w, h, data.style);
    };
    transport(video, clock, (i) => { frame = i; redraw(); }, (f) => f(video));
    toggle.addEventListener("change", () => { canvas.classList.toggle("on", toggle.checked); redraw(); });
    video.addEventListener("loadedmetadata", redraw);
    // Redraw on each presented frame while playing (the frame the viewer sees, not the clock's guess).
    if (video.requestVideoFrameCallback) {
      const onFrame = (now, meta) => { frame = clock.frameOf(meta.mediaTime); redraw(); video.requestVideoFrameCallback(onFrame); };
      video.requestVideoFrameCallback(onFrame);
    }
  }

  function abPage() {
    const va = $("#va"), vb = $("#vb"), vh = $("#vh");
    if (!va || !vb || !data) return;
    const clock = new Clock(data.fps, data.frames);
    const videos = [va, vb, vh].filter(Boolean);
    const followers = videos.filter((v) => v !== va);
    // Wipe: A on the left of the handle, B on the right.
    const wipe = $("#wipe"), clip = $("#va-clip"), handle = $("#handle");
    const setWipe = (pos) => {
      pos = Math.max(0, Math.min(1, pos));
      clip.style.clipPath = `inset(0 ${((1 - pos) * 100).toFixed(2)}% 0 0)`;
      handle.style.left = `${(pos * 100).toFixed(2)}%`;
      wipe.dataset.pos = pos.toFixed(4);
    };
    let dragging = false;
    const fromEvent = (e) => { const r = wipe.getBoundingClientRect(); setWipe((e.clientX - r.left) / r.width); };
    wipe.addEventListener("pointerdown", (e) => { dragging = true; wipe.setPointerCapture(e.pointerId); fromEvent(e); });
    wipe.addEventListener("pointermove", (e) => { if (dragging) fromEvent(e); });
    wipe.addEventListener("pointerup", () => { dragging = false; });
    wipe.addEventListener("pointercancel", () => { dragging = false; });
    handle.addEventListener("keydown", (e) => {
      const pos = parseFloat(wipe.dataset.pos || "0.5");
      if (e.key === "ArrowLeft" || e.key === "ArrowRight") { e.stopPropagation(); e.preventDefault(); setWipe(pos + (e.key === "ArrowLeft" ? -0.05 : 0.05)); }
    });
    setWipe(0.5);

    // Plots, each with a playhead; a click seeks.
    const pose = data.pose || {};
    const poseSeries = [
      ["a_vs_guide", `A (${data.labels[0]}) vs guide`, "#4cc2ff"],
      ["b_vs_guide", `B (${data.labels[1]}) vs guide`, "#ffb547"],
      ["a_vs_b", "A vs B", "#b69cff"],
    ].filter(([k]) => pose[k]).map(([k, name, color]) => ({ name, color, values: pose[k] }));
    let controls = null;
    const seek = (i) => controls && controls.seek(i);
    const plots = [];
    const host = (id) => document.getElementById(id);
    if (host("plot-psnr")) plots.push(linePlot(host("plot-psnr"), "PSNR of B vs A (dB)", [{ name: "PSNR", color: "#7ee787", values: data.psnr }], data.frames, seek));
    if (host("plot-ssim")) plots.push(linePlot(host("plot-ssim"), "SSIM of B vs A", [{ name: "SSIM", color: "#4cc2ff", values: data.ssim }], data.frames, seek));
    if (host("plot-pose")) plots.push(linePlot(host("plot-pose"), "Pose error (fraction of frame height)", poseSeries, data.frames, seek));

    controls = transport(va, clock, (i) => plots.forEach((p) => p.setFrame(i)), (f) => videos.forEach(f));
    // Followers chase the master: a drift over half a frame is corrected by a seek.
    const sync = () => {
      followers.forEach((v) => {
        // (a shorter follower stays on its last frame rather than seeking forever)
        if (Math.abs(v.currentTime - va.currentTime) > 0.5 / clock.fps && !(va.currentTime >= v.duration)) v.currentTime = va.currentTime;
        if (!va.paused && v.paused) play(v);
        if (va.paused && !v.paused) v.pause();
      });
      requestAnimationFrame(sync);
    };
    requestAnimationFrame(sync);
    // Loop all together: when A ends, every clip restarts at frame 0.
    va.addEventListener("ended", () => { videos.forEach((v) => { v.currentTime = 0; }); videos.forEach((v) => play(v)); });
    videos.forEach((v) => v.addEventListener("loadedmetadata", () => { v.currentTime = clock.timeOf(0); }, { once: true }));
  }

  if (page === "index") indexPage();
  if (page === "render") renderPage();
  if (page === "ab") abPage();
})();
