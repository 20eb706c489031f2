import { test } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, FilesystemEventType } from 'e2b'
import { withSandbox } from './helpers.mjs'

test('files: write, read, list, exists, makeDir, rename, remove', () =>
  withSandbox(async (sbx) => {
    const info = await sbx.files.write('/home/user/js.txt', 'from js ✓')
    assert.equal(info.path, '/home/user/js.txt')
    assert.equal(await sbx.files.read('/home/user/js.txt'), 'from js ✓')
    const bytes = await sbx.files.read('/home/user/js.txt', { format: 'bytes' })
    assert.equal(new TextDecoder().decode(bytes), 'from js ✓')

    assert.equal(await sbx.files.makeDir('/tmp/j/d'), true)
    assert.equal(await sbx.files.makeDir('/tmp/j/d'), false)
    await sbx.files.write('/tmp/j/f.txt', 'f')
    const names = (await sbx.files.list('/tmp/j')).map((e) => `${e.name}:${e.type}`).sort()
    assert.deepEqual(names, ['d:dir', 'f.txt:file'])
    assert.equal(await sbx.files.exists('/tmp/j/f.txt'), true)
    await sbx.files.rename('/tmp/j/f.txt', '/tmp/j/d/g.txt')
    assert.equal(await sbx.files.read('/tmp/j/d/g.txt'), 'f')
    await sbx.files.remove('/tmp/j')
    assert.equal(await sbx.files.exists('/tmp/j'), false)
    await assert.rejects(sbx.files.read('/tmp/j/d/g.txt'), FileNotFoundError)
  }))

test('files: watchDir streams events relative to the watched dir', () =>
  withSandbox(async (sbx) => {
    await sbx.files.makeDir('/tmp/watch')
    const events = []
    let done
    const removed = new Promise((resolve) => { done = resolve })
    const handle = await sbx.files.watchDir('/tmp/watch', (e) => {
      events.push(e)
      if (e.type === FilesystemEventType.REMOVE) done()
    })
    try {
      await sbx.files.write('/tmp/watch/n.txt', 'x')
      await sbx.files.remove('/tmp/watch/n.txt')
      await Promise.race([removed, new Promise((_, rej) => setTimeout(() => rej(new Error('no event')), 10000))])
    } finally {
      await handle.stop()
    }
    assert.ok(events.some((e) => e.name === 'n.txt' && e.type === FilesystemEventType.CREATE), JSON.stringify(events))
  }))

test('files: upload and download URLs', () =>
  withSandbox(async (sbx) => {
    const up = await sbx.uploadUrl('/home/user/up.txt')
    const form = new FormData()
    form.append('file', new Blob(['via js url']), 'up.txt')
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.text())
    const down = await sbx.downloadUrl('/home/user/up.txt')
    assert.equal(await (await fetch(down)).text(), 'via js url')
  }))
