// Voice in the playground (issue 45): a microphone button records, transcribes with the server's
// speech-to-text model and puts the words in the message box; a play button on each answer reads
// it aloud with its text-to-speech model. Both stay hidden when the server has no such model.
// Loaded after playground.js, whose `$`, `headers`, `errorText` and `setStatus` it uses.
"use strict";

const voice = { stt: null, tts: null, recorder: null, audio: null, captured: 0 };

async function findVoiceModels() {
  voice.stt = voice.tts = null;
  try {
    const response = await fetch("/v1/models", { headers: headers(false) });
    if (response.ok) {
      for (const m of (await response.json()).data || []) {
        const type = m.meta && m.meta.type;
        if (type === "stt" && !voice.stt) voice.stt = m.id;
        if (type === "tts" && !voice.tts) voice.tts = m.id;
      }
    }
  } catch (_) { /* no listing: no voice buttons */ }
  const canRecord = Boolean(navigator.mediaDevices && window.MediaRecorder);
  $("mic").hidden = !voice.stt || !canRecord;
  document.body.classList.toggle("can-speak", Boolean(voice.tts));
}

async function toggleMic() {
  const mic = $("mic");
  if (voice.recorder) { voice.recorder.stop(); return; }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (e) {
    setStatus(`Microphone: ${e.message || e}`);
    return;
  }
  const chunks = [];
  const recorder = new MediaRecorder(stream);
  voice.recorder = recorder;
  voice.captured = 0;
  recorder.addEventListener("dataavailable", (event) => {
    if (event.data.size) chunks.push(event.data);
    voice.captured += 1; // quarter seconds recorded so far
  });
  recorder.addEventListener("stop", () => {
    for (const track of stream.getTracks()) track.stop();
    voice.recorder = null;
    mic.textContent = "Mic";
    mic.classList.remove("recording");
    transcribe(new Blob(chunks, { type: recorder.mimeType || "audio/webm" }));
  });
  recorder.start(250);
  mic.textContent = "Stop recording";
  mic.classList.add("recording");
}

async function transcribe(blob) {
  const form = new FormData();
  form.append("model", voice.stt);
  form.append("file", blob, blob.type.includes("ogg") ? "speech.ogg" : blob.type.includes("mp4") ? "speech.m4a" : "speech.webm");
  setStatus("Transcribing…");
  try {
    const response = await fetch("/v1/audio/transcriptions", { method: "POST", headers: headers(false), body: form });
    if (!response.ok) { setStatus(await errorText(response)); return; }
    const text = ((await response.json()).text || "").trim();
    const prompt = $("prompt");
    prompt.value = prompt.value ? `${prompt.value} ${text}` : text;
    prompt.focus();
    setStatus("");
  } catch (e) {
    setStatus(String(e));
  }
}

// A play button for an answer's head; `text` gives what to read (the answer as it is by then).
function playButton(text) {
  const el = document.createElement("button");
  el.type = "button";
  el.className = "play";
  el.textContent = "Play";
  el.title = "Read the answer aloud";
  el.addEventListener("click", () => readAloud(text(), el));
  return el;
}

async function readAloud(text, button) {
  if (voice.audio) { voice.audio.pause(); voice.audio = null; }
  if (!voice.tts || !text.trim()) return;
  button.disabled = true;
  try {
    const body = { model: voice.tts, input: text.slice(0, 4096), voice: "alloy", response_format: "mp3" };
    const response = await fetch("/v1/audio/speech", { method: "POST", headers: headers(true), body: JSON.stringify(body) });
    if (!response.ok) { setStatus(await errorText(response)); return; }
    const url = URL.createObjectURL(await response.blob());
    const audio = new Audio(url);
    voice.audio = audio;
    audio.addEventListener("ended", () => URL.revokeObjectURL(url));
    await audio.play();
  } catch (e) {
    setStatus(String(e));
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("mic").addEventListener("click", toggleMic);
  $("api-key").addEventListener("change", findVoiceModels); // the listing may need the key
  $("reload-models").addEventListener("click", findVoiceModels);
  findVoiceModels();
});
