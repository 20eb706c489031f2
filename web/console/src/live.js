// The live sandbox list: one EventSource on /v1/events for the whole page.
// The stream starts with `reset` (list the sandboxes now); after it every
// change comes as a `sandbox` or `removed` event, so the page never polls.
// Events that arrive while the list is being read are applied after it.
// The stream also carries each running sandbox's metrics samples as spaced
// takes them (?metrics=true): the list's CPU and memory columns and the
// charts of a sandbox's page follow them.
import { useEffect, useState } from "preact/hooks";
import { get, url } from "./api.js";

const ALL_STATES = "creating,running,paused,resuming,killed,lost";

const state = {
  sandboxes: new Map(), // id -> sandbox
  usage: new Map(), // id -> its newest metrics sample, while it runs
  connected: false,
  connects: 0, // how many times the stream (re)connected: samples may have been missed before each
  loaded: false,
  error: "",
};
const listeners = new Set();
const sampleListeners = new Set();
let source = null;
let listing = null; // events held while a list is read
let generation = 0;

function notify() {
  for (const fn of listeners) fn();
}

// Samples come in bursts (every running sandbox each interval): the page
// renders once per frame for them, not once per sample.
let frame = 0;
function notifySoon() {
  if (!frame) {
    frame = requestAnimationFrame(() => {
      frame = 0;
      notify();
    });
  }
}

function apply(event, data) {
  if (event === "sandbox") {
    state.sandboxes.set(data.id, data);
    if (data.state !== "running") state.usage.delete(data.id);
  } else if (event === "removed") {
    state.sandboxes.delete(data.id);
    state.usage.delete(data.id);
  }
}

async function relist() {
  const gen = ++generation;
  listing = [];
  try {
    const sandboxes = new Map();
    let token;
    do {
      const page = await get("/v1/sandboxes", { state: ALL_STATES, limit: 1000, page_token: token });
      for (const sb of page.sandboxes) sandboxes.set(sb.id, sb);
      token = page.next_page_token;
    } while (token);
    if (gen !== generation) return;
    state.sandboxes = sandboxes;
    for (const [event, data] of listing) apply(event, data);
    state.loaded = true;
    state.error = "";
  } catch (e) {
    if (gen === generation) state.error = e.message;
  } finally {
    if (gen === generation) listing = null;
    notify();
  }
}

function onEvent(event) {
  return (e) => {
    const data = JSON.parse(e.data);
    if (listing) listing.push([event, data]);
    else apply(event, data);
    notify();
  };
}

// start opens the stream (once); stop closes it (sign-out).
export function start() {
  if (source) return;
  source = new EventSource(url("/v1/events", { metrics: true }));
  source.addEventListener("open", () => {
    state.connected = true;
    state.connects++;
    notify();
  });
  source.addEventListener("error", () => {
    // EventSource reconnects by itself, with Last-Event-ID.
    state.connected = false;
    notify();
  });
  source.addEventListener("reset", () => relist());
  source.addEventListener("sandbox", onEvent("sandbox"));
  source.addEventListener("removed", onEvent("removed"));
  source.addEventListener("metrics", (e) => {
    const { id, ...sample } = JSON.parse(e.data);
    const sb = state.sandboxes.get(id);
    if (!sb || sb.state === "running") state.usage.set(id, sample);
    for (const fn of sampleListeners) fn(id, sample);
    notifySoon();
  });
}

export function stop() {
  if (source) source.close();
  source = null;
  state.sandboxes = new Map();
  state.usage = new Map();
  state.loaded = false;
  state.connected = false;
  generation++;
}

// useLive re-renders the caller on every change and returns the state.
export function useLive() {
  const [, setTick] = useState(0);
  useEffect(() => {
    const fn = () => setTick((n) => n + 1);
    listeners.add(fn);
    return () => listeners.delete(fn);
  }, []);
  return state;
}

// onSample calls fn(id, sample) for every metrics sample the stream
// brings, until the returned function is called.
export function onSample(fn) {
  sampleListeners.add(fn);
  return () => sampleListeners.delete(fn);
}

// update puts a sandbox the page just got from the API (a create's answer)
// into the list before its event arrives.
export function update(sb) {
  if (sb && sb.id) {
    const { access_token: _, ...rest } = sb; // the page keeps no sandbox tokens
    state.sandboxes.set(sb.id, { ...state.sandboxes.get(sb.id), ...rest });
    notify();
  }
}
