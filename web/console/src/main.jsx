// The SPACE console: sign-in, then the pages, routed by the URL's hash.
import "./nonce.js";
import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import * as api from "./api.js";
import * as live from "./live.js";
import { SandboxesPage } from "./sandboxes.jsx";
import { SandboxPage } from "./sandbox.jsx";
import { TemplatesPage } from "./templates.jsx";
import { PlatformPage } from "./platform.jsx";

function useHash() {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const fn = () => setHash(window.location.hash);
    window.addEventListener("hashchange", fn);
    return () => window.removeEventListener("hashchange", fn);
  }, []);
  return hash;
}

function SignIn({ onSignedIn }) {
  const [key, setKey] = useState("");
  const [err, setErr] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr("");
    try {
      await api.signIn(key);
      setKey("");
      onSignedIn();
    } catch (ex) {
      setErr(ex.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <form onSubmit={submit} class="card" autocomplete="off">
        <h1>
          SPACE <span class="muted">console</span>
        </h1>
        <p class="muted">Sign in with an API key of this spaced. It is checked by spaced and kept there, in this browser's session only.</p>
        <label>
          API key
          <input type="password" name="key" value={key} onInput={(e) => setKey(e.target.value)} autofocus required data-testid="key" />
        </label>
        <button type="submit" class="primary" disabled={busy} data-testid="signin">
          {busy ? "Signing in…" : "Sign in"}
        </button>
        {err && (
          <div class="error" role="alert" data-testid="signin-error">
            {err}
          </div>
        )}
      </form>
    </main>
  );
}

const pages = [
  ["#/sandboxes", "Sandboxes"],
  ["#/templates", "Templates"],
  ["#/platform", "Platform"],
];

function Shell({ hash, onSignOut }) {
  const state = live.useLive();
  const who = api.whoami();
  let page;
  let m;
  if ((m = /^#\/sandboxes\/([a-z0-9]+)(?:\/(\w+))?/.exec(hash))) page = <SandboxPage id={m[1]} tab={m[2] || "overview"} />;
  else if (hash.startsWith("#/templates")) page = <TemplatesPage />;
  else if (hash.startsWith("#/platform")) page = <PlatformPage />;
  else page = <SandboxesPage />;
  return (
    <div class="shell">
      <header>
        <a class="brand" href="#/sandboxes">
          SPACE
        </a>
        <nav>
          {pages.map(([h, label]) => (
            <a href={h} class={hash.startsWith(h) || (h === "#/sandboxes" && !hash) ? "active" : ""}>
              {label}
            </a>
          ))}
        </nav>
        <span class={`live ${state.connected ? "on" : "off"}`} title="live updates (server-sent events)" data-testid="live">
          {state.connected ? "live" : "reconnecting"}
        </span>
        {who && (
          <span class="who muted" title={`key ${who.key_id}`} data-testid="who">
            {who.admin ? "admin" : `tenant ${who.tenant}`}
          </span>
        )}
        <button class="link" onClick={onSignOut} data-testid="signout">
          Sign out
        </button>
      </header>
      <main>{page}</main>
    </div>
  );
}

function App() {
  const hash = useHash();
  const [signedIn, setSignedIn] = useState(null);
  useEffect(() => {
    api.session().then(setSignedIn, () => setSignedIn(false));
    api.whenSignedOut(() => {
      live.stop();
      setSignedIn(false);
    });
  }, []);
  useEffect(() => {
    if (signedIn) live.start();
  }, [signedIn]);
  if (signedIn === null) return <div class="loading">Loading…</div>;
  if (!signedIn) return <SignIn onSignedIn={() => setSignedIn(true)} />;
  const signOut = async () => {
    await api.signOut();
    live.stop();
    setSignedIn(false);
  };
  return <Shell hash={hash} onSignOut={signOut} />;
}

render(<App />, document.getElementById("app"));
