// Templates and builds: the list, a build's log live (SSE), delete.
import { useEffect, useRef, useState } from "preact/hooks";
import * as api from "./api.js";
import { Action, ErrorBox, State, bytes, time, useAsync } from "./util.jsx";

function BuildLog({ id, onEnd }) {
  const [lines, setLines] = useState([]);
  const [end, setEnd] = useState(null);
  const ref = useRef(null);
  useEffect(() => {
    setLines([]);
    setEnd(null);
    const es = new EventSource(api.url(`/v1/builds/${id}/logs`));
    es.addEventListener("log", (e) => {
      const l = JSON.parse(e.data);
      setLines((ls) => [...ls.slice(-5000), l]);
    });
    es.addEventListener("end", (e) => {
      setEnd(JSON.parse(e.data));
      es.close();
      onEnd && onEnd();
    });
    return () => es.close();
  }, [id]);
  useEffect(() => {
    if (ref.current) ref.current.scrollTop = ref.current.scrollHeight;
  }, [lines]);
  return (
    <div class="card wide">
      <h2>
        Build <span class="mono">{id}</span>{" "}
        {end ? (
          <span data-testid="build-state">
            <State state={end.state} />
          </span>
        ) : (
          <span class="muted small">live</span>
        )}
      </h2>
      <pre class="output" ref={ref} data-testid="build-log">
        {lines.map((l) => (
          <span class={l.level === "error" ? "stderr" : ""}>
            {l.step !== undefined ? `[${l.step}] ` : ""}
            {l.message}
            {"\n"}
          </span>
        ))}
      </pre>
      {end && end.error && <ErrorBox error={`step ${end.error.step}: ${end.error.message}`} />}
    </div>
  );
}

export function TemplatesPage() {
  const [templates, reloadTemplates] = useAsync(() => api.get("/v1/templates"), []);
  const [builds, reloadBuilds] = useAsync(() => api.get("/v1/builds"), []);
  const [shown, setShown] = useState("");
  return (
    <section>
      <div class="toolbar">
        <h1>Templates</h1>
        <button
          onClick={() => {
            reloadTemplates();
            reloadBuilds();
          }}
          data-testid="templates-refresh"
        >
          Refresh
        </button>
      </div>
      <p class="muted small">
        Build templates with <span class="mono">space template build</span>, <span class="mono">POST /v1/builds</span> or E2B's Template SDK; their logs stream here live.
      </p>
      <ErrorBox error={templates.error} />
      <table class="list" data-testid="templates-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Tags</th>
            <th>Size</th>
            <th>Sandboxes</th>
            <th>Updated</th>
            <th></th>
          </tr>
        </thead>
        <tbody>
          {((templates.value && templates.value.templates) || []).map((t) => (
            <tr data-template={t.name}>
              <td class="mono">
                {t.name} {t.builtin && <span class="tag">built in</span>}
              </td>
              <td class="small">
                {(t.tags || []).map((g) => (
                  <span class="tag" title={g.build ? `build ${g.build}` : g.image}>
                    {g.tag}
                  </span>
                ))}
              </td>
              <td>{bytes(t.bytes)}</td>
              <td>{t.sandboxes}</td>
              <td class="small">{time(t.updated_at)}</td>
              <td>
                {!t.builtin && (
                  <Action
                    label="Delete"
                    kind="danger"
                    testid="delete-template"
                    confirm={`Delete template ${t.name} and its tags? Its images go once no sandbox uses them.`}
                    run={async () => {
                      await api.del(`/v1/templates/${t.name}`);
                      reloadTemplates();
                    }}
                  />
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2 class="section">Builds</h2>
      <ErrorBox error={builds.error} />
      <div class="stack">
        <table class="list">
          <thead>
            <tr>
              <th>Build</th>
              <th>Template</th>
              <th>State</th>
              <th>Steps</th>
              <th>Created</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {((builds.value && builds.value.builds) || []).map((b) => (
              <tr class={b.id === shown ? "selected" : ""} data-build={b.id}>
                <td class="mono">
                  <a
                    href="#"
                    onClick={(e) => {
                      e.preventDefault();
                      setShown(b.id);
                    }}
                  >
                    {b.id}
                  </a>
                </td>
                <td>{(b.tags || []).map((t) => `${b.template}:${t}`).join(", ") || b.template}</td>
                <td>
                  <State state={b.state} />
                </td>
                <td>
                  {b.step || 0}/{b.steps || 0} {b.cached ? <span class="muted small">({b.cached} cached)</span> : ""}
                </td>
                <td class="small">{time(b.created_at)}</td>
                <td>
                  {(b.state === "queued" || b.state === "building" || b.state === "waiting") && (
                    <Action
                      label="Cancel"
                      kind="danger"
                      run={async () => {
                        await api.post(`/v1/builds/${b.id}/cancel`);
                        reloadBuilds();
                      }}
                    />
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {shown && <BuildLog id={shown} onEnd={reloadBuilds} />}
      </div>
    </section>
  );
}
