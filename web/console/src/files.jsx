// The sandbox's files, through its agent: list, go into directories,
// download, upload, make a directory, delete.
import { useRef, useState } from "preact/hooks";
import * as api from "./api.js";
import { Action, ErrorBox, bytes, time, useAsync } from "./util.jsx";

function join(dir, name) {
  return dir.endsWith("/") ? dir + name : `${dir}/${name}`;
}

function parent(dir) {
  if (dir === "/" || !dir.includes("/")) return "/";
  const p = dir.replace(/\/+$/, "").replace(/\/[^/]*$/, "");
  return p || "/";
}

export function Files({ id }) {
  const [dir, setDir] = useState("/home/user");
  const [typed, setTyped] = useState("/home/user");
  const [list, reload] = useAsync(() => api.get(`/v1/sandboxes/${id}/files/list`, { path: dir, depth: 1 }), [id, dir]);
  const [err, setErr] = useState("");
  const [msg, setMsg] = useState("");
  const fileInput = useRef(null);
  const go = (d) => {
    setDir(d);
    setTyped(d);
    setMsg("");
  };
  const upload = async (e) => {
    setErr("");
    const files = [...e.target.files];
    try {
      for (const f of files) {
        await api.call("PUT", `/v1/sandboxes/${id}/files`, { query: { path: join(dir, f.name) }, body: f });
      }
      setMsg(`Uploaded ${files.map((f) => f.name).join(", ")}.`);
      reload();
    } catch (ex) {
      setErr(ex.message);
    } finally {
      e.target.value = "";
    }
  };
  const mkdir = async () => {
    const name = window.prompt("New directory name");
    if (!name) return;
    await api.post(`/v1/sandboxes/${id}/files/mkdir`, { path: join(dir, name) });
    reload();
  };
  const entries = ((list.value && list.value.entries) || []).slice();
  entries.sort((a, b) => (b.type === "dir") - (a.type === "dir") || a.name.localeCompare(b.name));
  return (
    <div class="card">
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          go(typed);
        }}
      >
        <button type="button" onClick={() => go(parent(dir))} title="parent directory">
          ↑
        </button>
        <input class="grow mono" value={typed} onInput={(e) => setTyped(e.target.value)} data-testid="files-path" />
        <button type="submit">Go</button>
        <button type="button" onClick={reload}>
          Refresh
        </button>
        <button type="button" onClick={mkdir}>
          New folder
        </button>
        <button type="button" class="primary" onClick={() => fileInput.current.click()}>
          Upload…
        </button>
        <input type="file" multiple ref={fileInput} onChange={upload} class="hidden" data-testid="files-upload" />
      </form>
      <ErrorBox error={list.error || err} />
      {msg && <p class="ok small">{msg}</p>}
      <table class="list" data-testid="files-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Size</th>
            <th>Permissions</th>
            <th>Owner</th>
            <th>Modified</th>
            <th></th>
          </tr>
        </thead>
        <tbody>
          {entries.map((e) => (
            <tr data-name={e.name}>
              <td class="mono">
                {e.type === "dir" ? (
                  <a
                    href="#"
                    onClick={(ev) => {
                      ev.preventDefault();
                      go(e.path);
                    }}
                  >
                    {e.name}/
                  </a>
                ) : (
                  e.name + (e.symlink_target ? ` → ${e.symlink_target}` : "")
                )}
              </td>
              <td>{e.type === "file" ? bytes(e.size) : ""}</td>
              <td class="mono small">{e.permissions}</td>
              <td class="small">
                {e.owner}
                {e.group && e.group !== e.owner ? `:${e.group}` : ""}
              </td>
              <td class="small">{time(e.modified_at)}</td>
              <td>
                {e.type === "file" && (
                  <a class="button" href={api.url(`/v1/sandboxes/${id}/files`, { path: e.path })} download={e.name}>
                    Download
                  </a>
                )}
                <Action
                  label="Delete"
                  kind="danger"
                  confirm={`Delete ${e.path}${e.type === "dir" ? " and everything in it" : ""}?`}
                  run={async () => {
                    await api.del(`/v1/sandboxes/${id}/files`, { path: e.path });
                    reload();
                  }}
                />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {list.value && entries.length === 0 && <p class="muted empty">Empty directory.</p>}
    </div>
  );
}
