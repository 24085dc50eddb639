// susurrus demo: microphone (or a file played as if live) -> AudioWorklet -> PCM16 at 24 kHz ->
// OpenAI Realtime transcription events over a WebSocket -> committed text plain, interim dimmed.
// With "Turn detection" the session uses server_vad: the server ends each speech turn itself, and
// each turn (an item) is its own paragraph.
"use strict";

const RATE = 24000; // OpenAI's PCM rate; the AudioContext resamples the microphone to it
const BLOCK = RATE / 10; // 100 ms per append
// event ids of the two commits that end a turn-detection session: the first ends a turn still
// open, the second always finds the buffer empty and its error comes after everything else
const FLUSH_MARKER = "demo-flush";
const END_MARKER = "demo-end";

const $ = (id) => document.getElementById(id);
const ui = {
  start: $("start"), stop: $("stop"), latency: $("latency"), file: $("file"), apikey: $("apikey"), turns: $("turns"),
  level: $("level"), status: $("status"), transcript: $("transcript"), wsurl: $("wsurl"),
  wordinfo: $("wordinfo"), speakers: $("speakers"),
};
// one colour per speaker label (S1, S2, ... or an enrolled name), in order of appearance
const SPEAKER_COLOURS = ["#1f5fbf", "#b8410f", "#237a3b", "#7a2fa8", "#a0185a", "#5c6b00", "#0f7a7a", "#6b4a1f"];
const speakerColour = new Map();
function colourOf(speaker) {
  if (!speakerColour.has(speaker)) speakerColour.set(speaker, SPEAKER_COLOURS[speakerColour.size % SPEAKER_COLOURS.length]);
  return speakerColour.get(speaker);
}
const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;
ui.wsurl.textContent = wsUrl;

let run = null; // the live capture: {ws, ctx, node, media, source, sent, turns}
const items = new Map(); // item_id -> {el, committed, interim, first}
let completed = 0;
let errorShown = false; // an error stays on screen until the user acts (Start, a file, Stop, latency)

// error: shown in red and kept; user: the user acted, so a kept error may be replaced
function showStatus(message, { error = false, user = false } = {}) {
  if (message === undefined || (errorShown && !error && !user)) return;
  errorShown = error;
  ui.status.textContent = message;
  ui.status.classList.toggle("error", error);
  document.body.dataset.error = error ? message : "";
}

function setState(state, message, opts) {
  document.body.dataset.state = state;
  showStatus(message, opts);
  const busy = state !== "idle";
  ui.start.disabled = busy;
  ui.file.disabled = busy;
  ui.turns.disabled = busy;
  ui.stop.disabled = state !== "live";
}

function item(id) {
  let it = items.get(id);
  if (!it) {
    const el = document.createElement("p");
    el.className = "item";
    el.dataset.itemId = id;
    const committed = document.createElement("span");
    committed.className = "committed";
    const interim = document.createElement("span");
    interim.className = "interim";
    el.append(committed, interim);
    ui.transcript.append(el);
    it = { el, committed, interim, first: true, pendingDelta: null };
    items.set(id, it);
  }
  return it;
}

function fmt(t) { return `${Number(t).toFixed(2)} s`; }

function onEvent(ev, ws) {
  switch (ev.type) {
    case "session.created":
    case "session.updated":
      break;
    case "conversation.item.input_audio_transcription.delta": {
      // plain committed text; replaced by word spans when susurrus.words follows
      const it = item(ev.item_id);
      const span = document.createElement("span");
      span.className = "delta";
      span.textContent = ev.delta || "";
      it.committed.append(span);
      it.pendingDelta = span;
      it.first = false;
      break;
    }
    case "susurrus.words": {
      const it = item(ev.item_id);
      const target = it.pendingDelta || it.committed.appendChild(document.createElement("span"));
      target.textContent = "";
      const atStart = it.committed.firstChild === target;
      ev.words.forEach((w, i) => {
        const span = document.createElement("span");
        span.className = "word";
        span.textContent = atStart && i === 0 ? w.word.trimStart() : w.word;
        span.title = `${fmt(w.start)} – ${fmt(w.end)}, committed at ${fmt(w.emitted_at)} ` +
          `(+${(w.emitted_at - w.end).toFixed(2)} s), p=${Number(w.probability).toFixed(2)}`;
        if (w.speaker) {
          span.style.color = colourOf(w.speaker);
          span.dataset.speaker = w.speaker;
          span.title = `${w.speaker}: ${span.title}`;
        }
        target.append(span);
      });
      it.pendingDelta = null;
      break;
    }
    case "susurrus.speaker": { // a new speaker: a tag in their colour before their words
      const it = item(ev.item_id);
      const tag = it.committed.appendChild(document.createElement("span"));
      tag.className = "speaker";
      tag.textContent = ` [${ev.speaker}] `;
      tag.style.color = colourOf(ev.speaker);
      break;
    }
    case "susurrus.interim":
      item(ev.item_id).interim.textContent = ev.text;
      break;
    case "input_audio_buffer.speech_started": // turn detection: the turn's paragraph opens
      item(ev.item_id).el.classList.add("speaking");
      break;
    case "input_audio_buffer.speech_stopped":
      item(ev.item_id).el.classList.remove("speaking");
      break;
    case "input_audio_buffer.committed":
      break;
    case "conversation.item.input_audio_transcription.completed": {
      const it = item(ev.item_id);
      it.interim.textContent = "";
      it.el.classList.remove("speaking");
      it.el.classList.add("done");
      it.el.dataset.transcript = ev.transcript;
      completed += 1;
      document.body.dataset.itemsCompleted = String(completed);
      if (!run || !run.turns) finish("Done.");
      else if (document.body.dataset.state === "live") showStatus(`Turn ${completed} done; listening…`);
      break;
    }
    case "conversation.item.input_audio_transcription.failed":
      item(ev.item_id).el.classList.add("failed");
      finish(`Transcription failed: ${ev.error && ev.error.message}`, { error: true });
      break;
    case "susurrus.warning":
      showStatus(ev.message);
      break;
    case "error":
      if (ev.error.event_id === FLUSH_MARKER || ev.error.event_id === END_MARKER) {
        // the closing commits of a turn-detection session: the second one means all is said
        if (ev.error.event_id === END_MARKER) finish("Done.");
        break;
      }
    {
      const message = `Server error (${ev.error.code}): ${ev.error.message}`;
      if (ev.error.code === "invalid_api_key" || ev.error.code === "session_limit_reached") {
        ws.failure = message; // the server closes the connection; begin() may still be starting the audio
        finish(message, { error: true });
      } else showStatus(message, { error: true });
      break;
    }
    default:
      break;
  }
}

function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

function connect() {
  const key = ui.apikey.value.trim();
  const protocols = ["realtime"];
  if (key) protocols.push(`openai-insecure-api-key.${key}`);
  const ws = new WebSocket(wsUrl, protocols);
  const turns = ui.turns.checked;
  ws.onmessage = (msg) => onEvent(JSON.parse(msg.data), ws);
  ws.onclose = (e) => {
    ws.closeReason = `Connection closed${e.reason ? `: ${e.reason}` : ""}.`;
    if (run && run.ws === ws) {
      teardown();
      setState("idle", ws.closeReason, { error: true });
    }
  };
  return new Promise((resolve, reject) => {
    ws.onopen = () => {
      ws.send(JSON.stringify({
        type: "session.update",
        session: {
          type: "transcription",
          audio: { input: { format: { type: "audio/pcm", rate: RATE },
                            turn_detection: turns ? { type: "server_vad" } : null,
                            transcription: { model: "susurrus" } } },
          susurrus: { latency: ui.latency.value, diarize: ui.speakers.checked },
        },
      }));
      resolve(ws);
    };
    ws.onerror = () => reject(new Error(`cannot connect to ${wsUrl}`));
  });
}

let begun = 0; // starts attempted, for tests: data-begun counts those whose outcome is on screen

async function begin(makeSource, label) {
  setState("connecting", "Connecting…", { user: true });
  let ws = null;
  try {
    ws = await connect();
    const ctx = new AudioContext({ sampleRate: RATE });
    await ctx.audioWorklet.addModule("pcm-worklet.js");
    const node = new AudioWorkletNode(ctx, "pcm16-capture", { processorOptions: { blockSamples: BLOCK } });
    const mute = ctx.createGain();
    mute.gain.value = 0;
    node.connect(mute).connect(ctx.destination); // keeps the worklet pulled by the graph, silently
    run = { ws, ctx, node, media: null, source: null, sent: 0, turns: ui.turns.checked };
    node.port.onmessage = (e) => {
      if (!run || run.ws.readyState !== WebSocket.OPEN) return;
      run.ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: toBase64(e.data.pcm) }));
      run.sent += e.data.pcm.byteLength / 2;
      const db = 20 * Math.log10(Math.max(e.data.rms, 1e-5));
      ui.level.style.width = `${Math.max(0, Math.min(100, (db + 60) * (100 / 60)))}%`;
    };
    await makeSource(ctx, node);
    if (!(await resumes(ctx))) {
      // the browser blocks audio until the page is clicked (autoplay policy): ctx.resume() would
      // wait for ever. A file is streamed anyway, paced by a timer, without being heard.
      if (!run.withoutPlaying) throw new Error("the browser blocked audio: click the page, then try again");
      run.withoutPlaying();
      label += " (the browser blocked playback: streaming without sound)";
    }
    if (ws.failure || ws.readyState !== WebSocket.OPEN) {
      // refused (a wrong or missing API key, too many sessions) or closed while the audio started
      teardown();
      setState("idle", ws.failure || ws.closeReason || "Connection closed.", { error: true });
    } else setState("live", label);
  } catch (err) {
    teardown();
    setState("idle", (ws && ws.failure) || `Could not start: ${err.message || err}`, { error: true });
  }
  begun += 1;
  document.body.dataset.begun = String(begun);
}

async function micSource(ctx, node) {
  const media = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  run.media = media;
  run.source = ctx.createMediaStreamSource(media);
  run.source.connect(node);
}

function fileSource(file) {
  return async (ctx, node) => {
    const audio = await ctx.decodeAudioData(await file.arrayBuffer()); // resampled to 24 kHz
    const source = ctx.createBufferSource();
    source.buffer = audio;
    source.connect(node); // the same capture path as the microphone, paced by the audio clock
    source.connect(ctx.destination); // and heard
    source.onended = () => stop();
    run.source = source;
    run.withoutPlaying = () => { // playback blocked: the rest of the audio sent at speaking pace by a timer
      source.onended = null;
      node.port.onmessage = null; // nothing more from the audio graph, should the browser start it later
      try { source.disconnect(); } catch (e) { /* already gone */ }
      paceWithoutPlaying(audio, run.sent); // from where the graph stopped (0 when it never ran)
    };
    source.start();
  };
}

// whether the audio context runs: resume() stays pending while the browser blocks audio
function resumes(ctx, waitMs = 1500) {
  return Promise.race([ctx.resume().then(() => ctx.state === "running", () => false),
    new Promise((resolve) => setTimeout(() => resolve(ctx.state === "running"), waitMs))]);
}

function paceWithoutPlaying(audio, from = 0) {
  const channels = Array.from({ length: audio.numberOfChannels }, (_, c) => audio.getChannelData(c));
  let at = Math.min(from, audio.length);
  const timer = setInterval(() => {
    if (!run || run.ws.readyState !== WebSocket.OPEN) { clearInterval(timer); return; }
    const n = Math.min(BLOCK, audio.length - at);
    const pcm = new Int16Array(n);
    for (let i = 0; i < n; i++) {
      let x = 0;
      for (const data of channels) x += data[at + i];
      pcm[i] = Math.max(-32768, Math.min(32767, Math.round((x / channels.length) * 32767)));
    }
    at += n;
    if (n) {
      run.ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: toBase64(pcm.buffer) }));
      run.sent += n;
    }
    if (at >= audio.length) { clearInterval(timer); stop(); }
  }, (1000 * BLOCK) / RATE);
  run.timer = timer;
}

function teardown() {
  if (!run) return;
  const r = run;
  run = null;
  if (r.timer) clearInterval(r.timer);
  if (r.media) r.media.getTracks().forEach((t) => t.stop());
  try { if (r.source) r.source.disconnect(); } catch (e) { /* already gone */ }
  r.ctx.close().catch(() => {});
  if (r.ws.readyState === WebSocket.OPEN) r.ws.close();
  ui.level.style.width = "0%";
}

function stop() {
  if (!run || document.body.dataset.state !== "live") return;
  setState("finishing", "Finishing the last words…", { user: true });
  if (run.media) run.media.getTracks().forEach((t) => t.stop());
  try { run.source.disconnect(); } catch (e) { /* already gone */ }
  run.node.port.postMessage({ flush: true });
  // the flushed block arrives on the port; commit after it
  setTimeout(() => {
    if (!run) return;
    if (run.sent === 0) finish("Nothing was captured.");
    else if (run.turns) {
      for (const id of [FLUSH_MARKER, END_MARKER]) {
        run.ws.send(JSON.stringify({ type: "input_audio_buffer.commit", event_id: id }));
      }
    } else run.ws.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
  }, 100);
}

function finish(message, opts) {
  teardown();
  setState("idle", message, opts);
}

ui.transcript.addEventListener("mouseover", (e) => {
  if (e.target.classList && e.target.classList.contains("word")) {
    ui.wordinfo.textContent = `“${e.target.textContent.trim()}”: ${e.target.title}`;
  }
});
ui.start.onclick = () => begin(micSource, ui.turns.checked ? "Listening… speak; pause between turns; Stop ends."
  : "Listening… speak, then press Stop.");
ui.stop.onclick = () => stop();
ui.file.onchange = () => {
  const file = ui.file.files[0];
  if (file) begin(fileSource(file), `Streaming ${file.name} as if live…`);
  ui.file.value = "";
};
ui.latency.onchange = () => {
  if (run && run.ws.readyState === WebSocket.OPEN) {
    run.ws.send(JSON.stringify({ type: "session.update", session: { type: "transcription",
      susurrus: { latency: ui.latency.value } } }));
    showStatus(run.turns ? `Latency ${ui.latency.value}: the current turn ends here.`
      : `Latency ${ui.latency.value}: applies from the next item.`, { user: true });
  }
};
