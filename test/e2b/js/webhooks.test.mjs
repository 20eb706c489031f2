// Lifecycle webhooks (E2B's /events/webhooks) around a sandbox the JS SDK
// drives. The SDK has no webhook methods: registration is fetch with the
// API key, as E2B's documentation shows. The receiver listens on 127.0.0.1,
// which the suite's spaced allows (SPACE_WEBHOOK_ALLOW in e2b_test.go), and
// checks each signature as E2B's documentation tells a receiver to.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import { Sandbox } from 'e2b'
import { API_KEY, API_URL, testId } from './helpers.mjs'

const LIFE = ['created', 'updated', 'paused', 'resumed', 'killed'].map((t) => `sandbox.lifecycle.${t}`)

function verify(secret, body, signature) {
  return createHash('sha256').update(secret + body).digest('base64').replace(/=+$/, '') === signature
}

async function receiver(secret) {
  const events = []
  const bad = []
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      const ok = verify(secret, body, req.headers['e2b-signature']) && req.headers['e2b-signature-version'] === 'v1'
      ;(ok ? events : bad).push(ok ? JSON.parse(body) : body)
      res.writeHead(ok ? 200 : 401).end()
    })
  })
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok))
  return { events, bad, server, url: `http://127.0.0.1:${server.address().port}/hook` }
}

async function api(method, path, body) {
  const r = await fetch(`${API_URL}${path}`, {
    method,
    headers: { 'X-API-Key': API_KEY, 'Content-Type': 'application/json' },
    body: body && JSON.stringify(body),
  })
  return { status: r.status, json: r.status === 200 || r.status === 201 ? await r.json().catch(() => null) : await r.text() }
}

test('webhooks: each lifecycle event once, in order, signed', async () => {
  const secret = `whsec-${randomUUID()}`
  const rcv = await receiver(secret)
  const reg = await api('POST', '/events/webhooks', { name: 'js', url: rcv.url, enabled: true, events: LIFE, signatureSecret: secret })
  assert.equal(reg.status, 201, JSON.stringify(reg.json))
  try {
    const id = testId()
    const sbx = await Sandbox.create({ metadata: { sandboxTestId: id } })
    await sbx.setTimeout(600_000)
    assert.equal(await sbx.pause(), true)
    await sbx.connect()
    await sbx.kill()
    const mine = () => rcv.events.filter((e) => e.sandboxId === sbx.sandboxId)
    const deadline = Date.now() + 60_000
    while (mine().length < LIFE.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
    await new Promise((r) => setTimeout(r, 1000)) // and nothing more comes
    assert.deepEqual(mine().map((e) => e.type), LIFE)
    for (const e of mine()) {
      assert.equal(e.version, 'v2')
      assert.equal(e.eventData.sandbox_metadata.sandboxTestId, id)
    }
    assert.deepEqual(rcv.bad, [])
  } finally {
    assert.equal((await api('DELETE', `/events/webhooks/${reg.json.id}`)).status, 200)
    rcv.server.close()
  }
})

test('webhooks: a floor address is refused', async () => {
  for (const url of ['http://127.0.0.2:9/', 'http://169.254.169.254/latest/meta-data']) {
    const r = await api('POST', '/events/webhooks', { name: 'x', url, signatureSecret: 's' })
    assert.equal(r.status, 400, String(r.json))
    assert.match(r.json, /"message"/)
  }
})
