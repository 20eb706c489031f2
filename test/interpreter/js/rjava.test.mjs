// R and Java through the unmodified @e2b/code-interpreter SDK (issue 25):
// languages 'r' (IRkernel) and 'java' (JJava here, IJava on E2B), as E2B's
// own JS tests use them (js/tests/env_vars/{r,java}.test.ts,
// defaultKernels), with plots, errors, contexts and timeouts.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import os from 'node:os'
import fs from 'node:fs'
import path from 'node:path'
import { Sandbox } from '@e2b/code-interpreter'

const debug = process.env.E2B_DEBUG === 'true'
let sandbox
before(async () => {
  assert.ok(debug || process.env.E2B_API_URL, 'run through interpreter_test.go')
  sandbox = await Sandbox.create()
})
after(async () => {
  if (!debug) await sandbox.kill()
})

async function workdir() {
  if (debug) return fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-js-rjava-'))
  const dir = `/home/user/ctx-${Math.random().toString(36).slice(2, 10)}`
  await sandbox.files.makeDir(dir)
  return dir
}

test('r', async () => {
  const hello = await sandbox.runCode('print("Hello, World!")', { language: 'r' })
  assert.deepEqual(hello.logs.stdout, ['[1] "Hello, World!"\n'])
  const env = await sandbox.runCode("Sys.getenv('FOO')", { language: 'r', envs: { FOO: 'bar' } })
  assert.equal(env.results[0].text.trim(), '[1] "bar"')
  const unset = await sandbox.runCode("Sys.getenv('FOO', unset = 'default')", { language: 'r' })
  assert.equal(unset.results[0].text.trim(), '[1] "default"')
  const plot = await sandbox.runCode('hist(c(1, 2, 2, 3, 3, 3))', { language: 'r' })
  assert.equal(plot.error, undefined)
  assert.ok(Buffer.from(plot.results[0].png, 'base64').subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47])))
  const frame = await sandbox.runCode('data.frame(n = 1:3)', { language: 'r' })
  assert.match(frame.results[0].html, /<table/)
  const failed = await sandbox.runCode('stop("boom")', { language: 'r' })
  assert.equal(failed.error.name, 'ERROR')
  assert.match(failed.error.value, /boom/)
})

test('java', async () => {
  const hello = await sandbox.runCode('System.out.println("Hello, World!")', { language: 'java' })
  assert.deepEqual(hello.logs.stdout, ['Hello, World!\n'])
  const env = await sandbox.runCode('System.getProperty("FOO")', { language: 'java', envs: { FOO: 'bar' } })
  assert.equal(env.results[0].text.trim(), 'bar')
  const unset = await sandbox.runCode('System.getProperty("FOO", "default")', { language: 'java' })
  assert.equal(unset.results[0].text.trim(), 'default')
  assert.equal((await sandbox.runCode('var list = java.util.List.of(1, 2, 3);', { language: 'java' })).error, undefined)
  assert.equal((await sandbox.runCode('list.stream().mapToInt(i -> i).sum()', { language: 'java' })).text, '6')
  const failed = await sandbox.runCode('Integer.parseInt("x")', { language: 'java' })
  assert.match(failed.error.value, /NumberFormatException/)
  assert.match(failed.error.traceback, /For input string: "x"/)
})

test('r and java contexts, timeouts', async () => {
  const dir = await workdir()
  for (const [language, cwd, slow, next] of [
    ['r', 'cat(getwd())', 'repeat {}', 'cat("next")'],
    ['java', 'System.out.print(new java.io.File("x").getAbsoluteFile().getParent())', 'while (true) {}', 'System.out.print("next")'],
  ]) {
    const ctx = await sandbox.createCodeContext({ cwd: dir, language })
    try {
      assert.equal(ctx.language, language)
      assert.deepEqual((await sandbox.runCode(cwd, { context: ctx })).logs.stdout, [dir])
      await assert.rejects(sandbox.runCode(slow, { context: ctx, timeoutMs: 3000 }), (err) => err.name === 'TimeoutError')
      assert.deepEqual((await sandbox.runCode(next, { context: ctx })).logs.stdout, ['next'])
      await sandbox.restartCodeContext(ctx)
      assert.deepEqual((await sandbox.runCode(next, { context: ctx })).logs.stdout, ['next'])
    } finally {
      await sandbox.removeCodeContext(ctx)
    }
  }
})
