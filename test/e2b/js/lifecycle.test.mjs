// Connections follow the sandbox's life, and nothing hangs (issue 14, item
// 1), through the JS SDK: a command whose sandbox is killed or paused under
// it fails at once with E2B's error; pause/connect/use cycles beside a slow
// reader of a large output, forks and creates never wait long; the first
// request after a pause, resume, fork or kill is answered at once; a stuck
// agent does not hold isRunning(). test_stress.py does the same in Python.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { Sandbox, SandboxNotFoundError, TimeoutError } from 'e2b'
import { testId } from './helpers.mjs'

const LIMIT_MS = 8000 // any one call (test_stress.py says why)
const NEXT_LIMIT_MS = 3000 // the first request after a pause, resume, fork or kill
const DURATION_MS = 15000 // of the stress

// timed runs fn and fails if it took longer than LIMIT_MS.
async function timed(label, fn, limit = LIMIT_MS) {
  const start = Date.now()
  const out = await fn()
  const took = Date.now() - start
  assert.ok(took < limit, `${label} took ${took} ms`)
  return out
}

// outcome is what a promise settled with: its value, or the error it threw.
function outcome(p) {
  return p.then(
    (v) => v,
    (err) => err,
  )
}

// killed checks what a command stream whose sandbox went away (killed, or
// paused without autoResume) fails with: the connection drops, as E2B's
// envd's does when its VM goes, the SDK probes /health, finds the sandbox
// gone (502) and raises its own TimeoutError.
function killed(err) {
  assert.ok(err instanceof TimeoutError, `${err}`)
  assert.ok(
    err.message.endsWith(': The sandbox was killed or reached its end of life while the request was in flight.'),
    err.message,
  )
}

test('lifecycle: a command whose sandbox is killed fails at once with TimeoutError', async () => {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() } })
  try {
    setTimeout(() => Sandbox.kill(sbx.sandboxId), 1000)
    const start = Date.now()
    await assert.rejects(sbx.commands.run('sleep 60'), (err) => {
      killed(err)
      return true
    })
    assert.ok(Date.now() - start < 1000 + LIMIT_MS)
    assert.equal(await sbx.isRunning(), false)
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})

test('lifecycle: pause/connect/use cycles beside a slow reader, forks and creates; no call waits', async () => {
  const made = []
  const create = async () => {
    const sbx = await timed('create', () => Sandbox.create({ metadata: { sandboxTestId: testId() } }))
    made.push(sbx.sandboxId)
    return sbx
  }
  let stopped = false
  const deadline = sleep(DURATION_MS).then(() => {
    stopped = true
  })

  // An endless output (~4 MB every 50 ms, of bytes made once) read in
  // small bites with pauses; killed under it, its stream ends at once.
  async function slowReader() {
    const sbx = await create()
    await sbx.commands.run('head -c 3000000 /dev/urandom | base64 -w 0 > /tmp/big')
    let read = 0
    const h = await sbx.commands.run('while :; do cat /tmp/big; sleep 0.05; done', {
      background: true,
      timeoutMs: 0,
      onStdout: async (data) => {
        read += data.length
        if (!stopped) await sleep(20)
      },
    })
    const waited = outcome(h.wait())
    const early = await Promise.race([waited.then(() => true), deadline.then(() => false)])
    assert.equal(early, false, 'the slow read ended early')
    assert.ok(read > 0, 'the slow reader got nothing')
    await timed('kill', () => Sandbox.kill(sbx.sandboxId))
    const err = await timed('stream end after kill', () => waited)
    killed(err)
  }

  async function cycles(n) {
    const sbx = await create()
    let i = 0
    // Two cycles at least, however slow the machine: the second pauses a
    // resumed sandbox.
    while (i < 2 || !stopped) {
      const bg = await timed('commands.run background', () => sbx.commands.run('sleep 600', { background: true }))
      const waited = outcome(bg.wait())
      assert.equal(await timed('pause', () => sbx.pause()), true)
      const err = await timed('stream end after pause', () => waited)
      killed(err)

      await timed('connect', () => sbx.connect())
      assert.equal(await timed('isRunning', () => sbx.isRunning()), true)
      assert.equal((await timed('commands.run', () => sbx.commands.run(`echo ${n}-${i}`))).stdout, `${n}-${i}\n`)
      await timed('files.write', () => sbx.files.write('/home/user/cycle.txt', `${n}-${i}`))
      assert.equal(await timed('files.read', () => sbx.files.read('/home/user/cycle.txt')), `${n}-${i}`)
      assert.equal(await timed('commands.kill', () => sbx.commands.kill(bg.pid)), true)
      i++
    }
  }

  async function forksAndCreates() {
    const parent = await create()
    while (!stopped) {
      for (const f of await timed('fork', () => parent.fork({ count: 1 }))) {
        assert.ok(!(f instanceof Error), `fork: ${f}`)
        made.push(f.sandboxId)
        assert.equal((await timed('commands.run', () => f.commands.run('true'))).exitCode, 0)
        await timed('kill', () => f.kill())
      }
      const s = await create()
      assert.equal(await timed('isRunning', () => s.isRunning()), true)
      await timed('kill', () => s.kill())
    }
  }

  try {
    // A failure ends the test at once; the others stop at the deadline.
    await Promise.all([slowReader(), cycles(0), cycles(1), cycles(2), forksAndCreates()])
  } finally {
    stopped = true
    await Promise.all(made.map((id) => Sandbox.kill(id).catch(() => {})))
  }
})

test('lifecycle: the first request after a pause, resume, fork or kill is answered at once', async () => {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() } })
  const first = (what, fn) => timed(`the first request after ${what}`, () => outcome(fn()), NEXT_LIMIT_MS)
  // A request to a sandbox that is gone: /files answers E2B's 502 (the SDK
  // raises TimeoutError with its words), an RPC fails and the SDK's health
  // probe then finds the sandbox gone.
  const notFound = (err) => {
    assert.ok(err instanceof TimeoutError && err.message.startsWith('The sandbox was not found'), `${err}`)
  }
  const gone = (err) => {
    assert.ok(err instanceof SandboxNotFoundError, `${err}`)
  }
  try {
    // Connections to the instance in use: spaced's pool holds them.
    await sbx.files.write('/home/user/f.txt', 'kept')
    assert.equal((await sbx.commands.run('true')).exitCode, 0)

    assert.equal(await sbx.pause(), true)
    assert.equal(await first('a pause', () => sbx.isRunning()), false)
    notFound(await first('a pause', () => sbx.files.read('/home/user/f.txt')))
    gone(await first('a pause', () => sbx.commands.run('true')))

    await sbx.connect() // a new instance of the same sandbox
    assert.equal(await first('a resume', () => sbx.files.read('/home/user/f.txt')), 'kept')
    assert.equal((await first('a resume', () => sbx.commands.run('echo x'))).stdout, 'x\n')

    const [child] = await sbx.fork({ count: 1 })
    assert.ok(!(child instanceof Error), `fork: ${child}`)
    try {
      assert.equal((await first('a fork', () => sbx.commands.run('echo parent'))).stdout, 'parent\n')
      assert.equal(await first('a fork', () => child.files.read('/home/user/f.txt')), 'kept')
    } finally {
      await child.kill()
    }

    assert.equal(await sbx.kill(), true)
    assert.equal(await first('a kill', () => sbx.isRunning()), false)
    gone(await first('a kill', () => sbx.commands.run('true')))
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})

// runsc on the daemon's sandboxes (e2b_test.go says where they are).
function runsc(...args) {
  for (const v of ['SPACE_TEST_RUNSC', 'SPACE_TEST_RUNSC_ROOT']) {
    if (!process.env[v]) throw new Error(`${v} must be set (run through test/e2b/e2b_test.go)`)
  }
  execFileSync(process.env.SPACE_TEST_RUNSC, ['--root', process.env.SPACE_TEST_RUNSC_ROOT, ...args], { timeout: 30000 })
}

test('lifecycle: a stuck agent does not hold isRunning()', async () => {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() } })
  try {
    // Frozen, the sandbox is live to spaced but nothing in it answers:
    // /health gets E2B's 502 within spaced's bound for it (5 s), long
    // before the SDK's 60 s request timeout.
    runsc('pause', sbx.sandboxId)
    try {
      assert.equal(await timed('isRunning of a stuck agent', () => sbx.isRunning(), 5000 + NEXT_LIMIT_MS), false)
    } finally {
      runsc('resume', sbx.sandboxId)
    }
    assert.equal(await sbx.isRunning(), true)
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})
