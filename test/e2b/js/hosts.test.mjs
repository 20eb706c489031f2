// getHost() URLs on one machine, with no DNS server of one's own (issue 14,
// item 7): "<port>-<id>.localhost:<spaced's port>". Node asks the OS
// resolver, which on a plain Debian ("hosts: files dns") does not know
// *.localhost; a lookup that maps it to loopback, as RFC 6761 says
// (and as systemd-resolved, nss-myhostname, curl and browsers do), is all
// a Node program needs (docs/e2b.md).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import dns from 'node:dns'
import http from 'node:http'
import { Sandbox } from 'e2b'
import { SANDBOX_URL, testId, withSandbox } from './helpers.mjs'

function localhostLookup(hostname, opts, cb) {
  if (hostname === 'localhost' || hostname.endsWith('.localhost')) {
    return opts.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4)
  }
  return dns.lookup(hostname, opts, cb)
}

// get fetches url with node:http and the lookup above.
function get(url) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { lookup: localhostLookup, timeout: 20_000 }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('timeout', () => req.destroy(new Error('timed out')))
    req.on('error', reject)
  })
}

async function serve(sbx, text) {
  await sbx.files.write('/tmp/www/index.html', text)
  await sbx.commands.run('cd /tmp/www && python3 -m http.server 8000', { background: true })
  const url = `http://${sbx.getHost(8000)}/index.html`
  for (const deadline = Date.now() + 15_000; ; ) {
    const r = await get(url).catch(() => ({}))
    if (r.status === 200) return url
    assert.ok(Date.now() < deadline, 'the server in the sandbox never answered')
    await new Promise((ok) => setTimeout(ok, 200))
  }
}

test('hosts: getHost URL reaches a port in the sandbox', () =>
  withSandbox(async (sbx) => {
    const port = new URL(SANDBOX_URL).port
    assert.equal(sbx.getHost(8000), `8000-${sbx.sandboxId}.localhost:${port}`)
    const url = await serve(sbx, 'served by host name')
    assert.deepEqual(await get(url), { status: 200, body: 'served by host name' })
  }))

test('hosts: a request to a getHost URL wakes a paused auto-resume sandbox', async () => {
  const sbx = await Sandbox.create({
    metadata: { sandboxTestId: testId() },
    lifecycle: { onTimeout: 'pause', autoResume: true },
  })
  try {
    const url = await serve(sbx, 'woken by traffic')
    assert.equal(await sbx.pause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    assert.deepEqual(await get(url), { status: 200, body: 'woken by traffic' })
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})
