// Builds the console into internal/console/dist (embedded in spaced):
// src/main.jsx and what it imports -> assets/app.js and assets/app.css,
// src/index.html -> index.html. Run by scripts/build-console.sh, which
// also records the hash of the sources next to the output.
//
// Usage: node build.mjs [outdir]   (default ../../internal/console/dist)
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] || join(here, "../../internal/console/dist"));

rmSync(join(out, "assets"), { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });
await esbuild.build({
  entryPoints: { app: join(here, "src/main.jsx") },
  outdir: join(out, "assets"),
  bundle: true,
  minify: true,
  format: "iife",
  target: ["chrome110", "firefox110", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
  // Reproducible output: the test that checks the committed bundle
  // rebuilds it and compares bytes.
  sourcemap: false,
  metafile: false,
});
copyFileSync(join(here, "src/index.html"), join(out, "index.html"));
