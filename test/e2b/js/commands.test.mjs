import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError } from 'e2b'
import { withSandbox } from './helpers.mjs'

test('commands.run: stdout, stderr, exit code', () =>
  withSandbox(async (sbx) => {
    const r = await sbx.commands.run('echo out; echo err >&2; whoami')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\nuser\n')
    assert.equal(r.stderr, 'err\n')
  }))

test('commands.run: a non-zero exit throws CommandExitError', () =>
  withSandbox(async (sbx) => {
    await assert.rejects(sbx.commands.run('echo nope >&2; exit 4'), (err) => {
      assert.ok(err instanceof CommandExitError)
      assert.equal(err.exitCode, 4)
      assert.equal(err.stderr, 'nope\n')
      return true
    })
  }))

test('commands: output streams event by event', () =>
  withSandbox(async (sbx) => {
    // The command waits for a file written only once its first line has
    // arrived: a stream held back to the end never ends (a timed check
    // flaked on a loaded host, CI run 28).
    const seen = []
    let first
    const firstSeen = new Promise((resolve) => { first = resolve })
    const cmd = await sbx.commands.run('echo 1; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; echo 2', {
      background: true,
      timeoutMs: 60_000,
      onStdout: (data) => { seen.push(data); first() },
    })
    await firstSeen
    assert.deepEqual(seen, ['1\n'])
    await sbx.files.write('/tmp/go-on', '')
    await cmd.wait()
    assert.deepEqual(seen, ['1\n', '2\n'])
  }))

test('commands: background, connect by pid, stdin, list, kill', () =>
  withSandbox(async (sbx) => {
    const bg = await sbx.commands.run('sleep 1; echo bg', { background: true })
    const again = await sbx.commands.connect(bg.pid)
    assert.equal((await again.wait()).stdout, 'bg\n')

    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'from js\n')
    await sbx.commands.closeStdin(cat.pid)
    assert.equal((await cat.wait()).stdout, 'from js\n')

    const sleeper = await sbx.commands.run('sleep 60', { background: true })
    const pids = (await sbx.commands.list()).map((p) => p.pid)
    assert.ok(pids.includes(sleeper.pid))
    assert.equal(await sbx.commands.kill(sleeper.pid), true)
    await assert.rejects(sleeper.wait(), CommandExitError)
  }))

test('pty: create, send, resize, kill', () =>
  withSandbox(async (sbx) => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
    await sbx.pty.resize(h.pid, { cols: 100, rows: 33 })
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; echo js-$((6*7)); exit\n'))
    await h.wait()
    assert.match(out, /33 100/)
    assert.match(out, /js-42/)

    const k = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
    assert.equal(await sbx.pty.kill(k.pid), true)
  }))
