// File metadata, symlinks, PTY resize and error texts as E2B's envd gives
// them, through the JS SDK (see python/test_files_details.py for the rules).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, InvalidArgumentError, NotFoundError, SandboxError } from 'e2b'
import { withSandbox } from './helpers.mjs'

test('files: metadata is read back, carried by list and rename, replaced by an overwrite', () =>
  withSandbox(async (sbx) => {
    const md = { author: 'mish', purpose: 'upload' }
    assert.deepEqual((await sbx.files.write('/tmp/m.txt', 'one', { metadata: md })).metadata, md)
    assert.deepEqual((await sbx.files.getInfo('/tmp/m.txt')).metadata, md)
    assert.deepEqual((await sbx.files.write('/tmp/u.txt', 'x', { metadata: { Owner: 'Ana' } })).metadata, { owner: 'Ana' })
    const listed = Object.fromEntries((await sbx.files.list('/tmp')).map((e) => [e.name, e.metadata]))
    assert.deepEqual(listed['m.txt'], md)
    assert.deepEqual((await sbx.files.rename('/tmp/m.txt', '/tmp/n.txt')).metadata, md)
    assert.deepEqual((await sbx.files.write('/tmp/n.txt', 'two', { metadata: { author: 'ana' } })).metadata, { author: 'ana' })
    const cleared = await sbx.files.write('/tmp/n.txt', 'three')
    assert.equal(cleared.metadata, undefined)
    assert.equal((await sbx.files.getInfo('/tmp/n.txt')).metadata, undefined)
    assert.deepEqual((await sbx.files.write('/tmp/o.txt', 'o', { metadata: { k: 'v' }, useOctetStream: true })).metadata, { k: 'v' })
    await assert.rejects(sbx.files.write('/tmp/bad.txt', 'x', { metadata: { 'bad key': 'v' } }), InvalidArgumentError)
    assert.equal(await sbx.files.exists('/tmp/bad.txt'), false)
  }))

test('files: symlinks resolve to an absolute target; a broken one names itself', () =>
  withSandbox(async (sbx) => {
    await sbx.files.write('/tmp/links/target.txt', 't')
    await sbx.commands.run('ln -s target.txt rel && ln -s /tmp/links/rel chain && ln -s missing broken', { cwd: '/tmp/links' })
    for (const name of ['rel', 'chain']) {
      const info = await sbx.files.getInfo(`/tmp/links/${name}`)
      // The JS SDK reports the target's type for a link (it has no symlink flag).
      assert.equal(info.type, 'file', JSON.stringify(info))
      assert.equal(info.symlinkTarget, '/tmp/links/target.txt')
      assert.equal(info.permissions, 'Lrwxrwxrwx')
    }
    const broken = await sbx.files.getInfo('/tmp/links/broken')
    assert.equal(broken.symlinkTarget, '/tmp/links/broken')
    assert.equal(broken.type, undefined)
    assert.equal((await sbx.files.getInfo('/tmp/links/target.txt')).symlinkTarget, undefined)
  }))

test('pty: resize reaches a running program; errors as envd', () =>
  withSandbox(async (sbx) => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
    // A foreground program that prints the size at each SIGWINCH.
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode(
      "python3 -c \"import os, signal, time; signal.signal(signal.SIGWINCH, lambda *a: " +
      "print('winch=%d %d' % os.get_terminal_size()[::-1], flush=True)); print('ready', flush=True); time.sleep(60)\"\n"))
    const until = async (re) => {
      const deadline = Date.now() + 10_000
      while (!re.test(out) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
      assert.match(out, re)
    }
    await until(/ready\r\n/)
    await sbx.pty.resize(h.pid, { cols: 140, rows: 45 })
    await until(/winch=45 140/)
    assert.equal(await sbx.pty.kill(h.pid), true)
    await h.wait().catch(() => {})
    await assert.rejects(sbx.pty.resize(h.pid, { cols: 10, rows: 10 }), NotFoundError)
    const cmd = await sbx.commands.run('sleep 30', { background: true })
    await assert.rejects(sbx.pty.resize(cmd.pid, { cols: 10, rows: 10 }),
      (e) => e instanceof SandboxError && /error resizing tty: tty not assigned to process/.test(e.message))
    await cmd.kill()
  }))

test('errors: envd texts for a missing file and an expired signed URL', () =>
  withSandbox(async (sbx) => {
    await assert.rejects(sbx.files.read('/tmp/nothing'),
      (e) => e instanceof FileNotFoundError && e.message === "path '/tmp/nothing' does not exist")
    await assert.rejects(sbx.files.getInfo('/tmp/nothing'),
      (e) => e instanceof FileNotFoundError && /file not found: lstat \/tmp\/nothing: no such file or directory/.test(e.message))
    await sbx.files.write('/tmp/s.txt', 's')
    const url = await sbx.downloadUrl('/tmp/s.txt', { useSignatureExpiration: 1 })
    assert.equal(await (await fetch(url)).text(), 's')
    await new Promise((r) => setTimeout(r, 2_200))
    const res = await fetch(url)
    assert.equal(res.status, 401)
    assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
  }))
