// The live sandbox list: one EventSource on /v1/events for the whole page.
// The stream starts with `reset` (list the sandboxes now); after it every
// change comes as a `sandbox` or `removed` event, so the page never polls.
// Events that arrive while the list is being read are applied after it.
import { useEffect, useState } from "preact/hooks";
import { get, url } from "./api.js";

const ALL_STATES = "creating,running,paused,resuming,killed,lost";

const state = {
  sandboxes: new Map(), // id -> sandbox
  connected: false,
  loaded: false,
  error: "",
};
const listeners = new Set();
let source = null;
let listing = null; // events held while a list is read
let generation = 0;

function notify() {
  for (const fn of listeners) fn();
}

function apply(event, data) {
  if (event === "sandbox") state.sandboxes.set(data.id, data);
  else if (event === "removed") state.sandboxes.delete(data.id);
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
  source = new EventSource(url("/v1/events"));
  source.addEventListener("open", () => {
    state.connected = true;
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
}

export function stop() {
  if (source) source.close();
  source = null;
  state.sandboxes = new Map();
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

// update puts a sandbox the page just got from the API (a create's answer)
// into the list before its event arrives.
export function update(sb) {
  if (sb && sb.id) {
    const { access_token: _, ...rest } = sb; // the page keeps no sandbox tokens
    state.sandboxes.set(sb.id, { ...state.sandboxes.get(sb.id), ...rest });
    notify();
  }
}
