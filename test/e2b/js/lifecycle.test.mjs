// Connections follow the sandbox's life (issue 14, item 1), through the JS
// SDK: a command whose sandbox is killed or paused under it fails at once
// with E2B's error, and pause/connect/use cycles never wait long.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, TimeoutError } from 'e2b'
import { testId } from './helpers.mjs'

const LIMIT_MS = 6000 // any one call

// timed runs fn and fails if it took longer than LIMIT_MS.
async function timed(label, fn) {
  const start = Date.now()
  const out = await fn()
  const took = Date.now() - start
  assert.ok(took < LIMIT_MS, `${label} took ${took} ms`)
  return out
}

// ended is E2B's message for a command stream whose sandbox went away
// (killed or paused): the Connect stream ends "unavailable".
function ended(id) {
  return `[unavailable] the connection to sandbox ${id} ended before the stream completed: This error is likely due to sandbox timeout. You can modify the sandbox timeout by passing 'timeoutMs' when starting the sandbox or calling '.setTimeout' on the sandbox with the desired timeout.`
}

test('lifecycle: a command whose sandbox is killed fails at once with TimeoutError', async () => {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() } })
  try {
    setTimeout(() => Sandbox.kill(sbx.sandboxId), 1000)
    const start = Date.now()
    await assert.rejects(sbx.commands.run('sleep 60'), (err) => {
      assert.ok(err instanceof TimeoutError, `${err}`)
      assert.equal(err.message, ended(sbx.sandboxId))
      return true
    })
    assert.ok(Date.now() - start < 1000 + LIMIT_MS)
    assert.equal(await sbx.isRunning(), false)
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})

test('lifecycle: pause/connect/use cycles, a stream open at each pause ends', async () => {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() } })
  try {
    for (let i = 0; i < 4; i++) {
      const bg = await timed('commands.run background', () => sbx.commands.run('sleep 600', { background: true }))
      const waited = bg.wait().then(
        () => null,
        (err) => err,
      )
      assert.equal(await timed('pause', () => sbx.pause()), true)
      const err = await timed('stream end after pause', () => waited)
      assert.ok(err instanceof TimeoutError, `${err}`)
      assert.equal(err.message, ended(sbx.sandboxId))

      await timed('connect', () => sbx.connect())
      assert.equal(await timed('isRunning', () => sbx.isRunning()), true)
      assert.equal((await timed('commands.run', () => sbx.commands.run(`echo ${i}`))).stdout, `${i}\n`)
      await timed('files.write', () => sbx.files.write('/home/user/cycle.txt', `${i}`))
      assert.equal(await timed('files.read', () => sbx.files.read('/home/user/cycle.txt')), `${i}`)
      assert.equal(await timed('commands.kill', () => sbx.commands.kill(bg.pid)), true)
    }
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})
