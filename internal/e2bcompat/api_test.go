package e2bcompat

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPlanes(t *testing.T) {
	h := newHarness(t)
	if resp := h.do("GET", "/health", nil, nil); resp.StatusCode != 200 || readAll(resp) != "Health check successful" {
		t.Fatalf("E2B /health: %d", resp.StatusCode)
	}
	for _, p := range []string{"/v1/sandboxes", "/healthz", "/metrics", "/"} {
		if got := readAll(h.do("GET", p, nil, nil)); got != "native "+p {
			t.Errorf("GET %s went to %q, want the native API", p, got)
		}
	}
	sb := h.create(nil)
	// The same /health with E2b-Sandbox-Id is the sandbox's (envd's).
	resp := h.do("GET", "/health", nil, map[string]string{headerSandboxID: sb.SandboxID})
	var s seen
	decode(t, resp, &s)
	if s.Path != "/health" || h.lastDial() != "10.0.0.1:49983" {
		t.Fatalf("sandbox /health: %+v via %s", s, h.lastDial())
	}
}

func TestAPIKey(t *testing.T) {
	h := newHarness(t)
	wantError(t, h.do("GET", "/v2/sandboxes", nil, nil), 401)
	wantError(t, h.do("GET", "/v2/sandboxes", nil, map[string]string{"X-API-Key": "e2b_00"}), 401)
	wantError(t, h.do("POST", "/sandboxes", `{}`, map[string]string{"X-API-Key": strings.ToUpper(testKey)}), 401)
	if resp := h.do("GET", "/v2/sandboxes", nil, map[string]string{"Authorization": "Bearer " + testKey}); resp.StatusCode != 200 {
		t.Fatalf("bearer key: %d", resp.StatusCode)
	}
}

func TestCreate(t *testing.T) {
	h := newHarness(t)
	resp := h.api("POST", "/v2/sandboxes", map[string]any{
		"templateID": "base", "metadata": map[string]string{"k": "v"}, "envVars": map[string]string{"A": "1"},
		"newFieldFromAFutureSDK": true,
	})
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, readAll(resp))
	}
	var sb sandboxJSON
	decode(t, resp, &sb)
	host := strings.TrimPrefix(h.srv.URL, "http://127.0.0.1")
	if sb.ClientID == "" || sb.EnvdVersion != "0.6.13" || sb.EnvdAccessToken != "token-1" || sb.TemplateID != "base" ||
		sb.Domain == nil || *sb.Domain != "localhost"+host || sb.TrafficAccessToken != nil {
		t.Fatalf("create answer: %+v", sb)
	}
	req := h.fake.creates[0]
	if req.Timeout != 300*time.Second || req.Env["A"] != "1" || req.Metadata["k"] != "v" || req.OpenAccess {
		t.Fatalf("create request: %+v", req)
	}

	// v1: timeout defaults to 15 s; secure=false opens the agent port.
	resp = h.api("POST", "/sandboxes", map[string]any{"templateID": "base", "secure": false, "allow_internet_access": false})
	if resp.StatusCode != 201 {
		t.Fatalf("v1 create: %d", resp.StatusCode)
	}
	var open sandboxJSON
	decode(t, resp, &open)
	if open.EnvdAccessToken != "" || !h.fake.creates[1].OpenAccess || h.fake.creates[1].Timeout != 15*time.Second {
		t.Fatalf("insecure v1 create: %+v %+v", open, h.fake.creates[1])
	}

	// Private ports get a traffic token.
	sb = h.create(map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	if sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == "" {
		t.Fatalf("private ports without a traffic token: %+v", sb)
	}

	// Volume mounts reach the sandbox service as read-write mounts by name.
	h.create(map[string]any{"templateID": "base", "volumeMounts": []map[string]any{{"name": "v", "path": "/mnt/v"}}})
	if got := h.fake.creates[len(h.fake.creates)-1].Volumes; len(got) != 1 || got[0].Name != "v" || got[0].Path != "/mnt/v" || got[0].ReadOnly {
		t.Fatalf("volume mounts at create: %+v", got)
	}

	for body, status := range map[string]int{
		`{"templateID":"base","mcp":["time"]}`:     400,
		`{"templateID":"base","mcp":"time"}`:       400,
		`{"templateID":"base","timeout":0}`:        400,
		`{"templateID":"base","metadata":{"k":1}}`: 400,
		`{"templateID":"nosuch"}`:                  404,
		`{"templateID":`:                           400,
		``:                                         400,
	} {
		e := wantError(t, h.api("POST", "/v2/sandboxes", body), status)
		if status == 501 && !strings.Contains(e.Message, "not") {
			t.Errorf("%s: unclear message %q", body, e.Message)
		}
	}
}

// A spaced without a template service answers E2B's template routes with
// a 501 that says so, not a 404 as for a route that does not exist.
func TestTemplatesWithoutTemplateService(t *testing.T) {
	h := newHarness(t)
	for _, r := range []struct{ method, path string }{
		{"POST", "/v3/templates"},
		{"GET", "/templates"},
		{"GET", "/templates/t1/builds/b1/status"},
		{"PUT", "/templates/t1/files/h1/upload"},
	} {
		e := wantError(t, h.api(r.method, r.path, `{}`), 501)
		if !strings.Contains(e.Message, "template builds are not served") {
			t.Errorf("%s %s: unclear message %q", r.method, r.path, e.Message)
		}
	}
}

func TestDomain(t *testing.T) {
	h := newHarness(t)
	for host, want := range map[string]string{
		"127.0.0.1:7070":     "localhost:7070",
		"[::1]:7070":         "localhost:7070",
		"localhost:7070":     "localhost:7070",
		"spaced.example:443": "spaced.example:443",
		"spaced.example":     "spaced.example",
		"10.1.2.3:7070":      "<nil>",
	} {
		resp := h.do("POST", "/v2/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-KEY": testKey, "Host": host})
		var sb sandboxJSON
		decode(t, resp, &sb)
		got := "<nil>"
		if sb.Domain != nil {
			got = *sb.Domain
		}
		if got != want {
			t.Errorf("Host %s: domain %s, want %s", host, got, want)
		}
	}
}

func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	sb := h.create(map[string]any{"templateID": "base", "metadata": map[string]string{"m": "1"},
		"network": map[string]any{"allowOut": []string{"1.1.1.1"}, "denyOut": []string{"0.0.0.0/0"},
			"rules": map[string]any{"api.example.com": []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"X": "y"}}}}}}})
	id := sb.SandboxID

	var d sandboxDetailJSON
	decode(t, h.api("GET", "/sandboxes/"+id, nil), &d)
	if d.SandboxID != id || d.State != "running" || d.ClientID == "" || d.EnvdVersion != EnvdVersion ||
		d.CPUCount != 1 || d.MemoryMB != 512 || d.DiskSizeMB != 1024 || d.StartedAt.IsZero() || d.EndAt.IsZero() ||
		d.EnvdAccessToken != "token-1" || d.Metadata["m"] != "1" || !d.AllowInternetAccess || d.Lifecycle.OnTimeout != "kill" {
		t.Fatalf("detail: %+v", d)
	}
	if d.Network == nil || d.Network.AllowOut[0] != "1.1.1.1" || d.Network.DenyOut[0] != "0.0.0.0/0" ||
		!strings.Contains(string(d.Network.Rules), "api.example.com") {
		t.Fatalf("network not reported as stored: %+v", d.Network)
	}

	if resp := h.api("POST", "/sandboxes/"+id+"/timeout", map[string]int{"timeout": 60}); resp.StatusCode != 204 {
		t.Fatalf("timeout: %d", resp.StatusCode)
	}
	wantError(t, h.api("POST", "/sandboxes/"+id+"/timeout", map[string]int{"timeout": -1}), 400)
	wantError(t, h.api("POST", "/sandboxes/"+id+"/timeout", map[string]any{}), 400)

	if resp := h.api("PUT", "/sandboxes/"+id+"/network", map[string]any{"allowOut": []string{"8.8.8.8"}, "allow_internet_access": true}); resp.StatusCode != 204 {
		t.Fatalf("network update: %d", resp.StatusCode)
	}
	var updated sandboxDetailJSON
	decode(t, h.api("GET", "/sandboxes/"+id, nil), &updated)
	if updated.Network.AllowOut[0] != "8.8.8.8" || updated.Network.DenyOut != nil {
		t.Fatalf("network after update: %+v", updated.Network)
	}

	for _, v := range []string{"/sandboxes/", "/v2/sandboxes/"} {
		resp := h.api("POST", v+id+"/connect", map[string]int{"timeout": 600})
		if resp.StatusCode != 200 {
			t.Fatalf("connect %s: %d", v, resp.StatusCode)
		}
		var c sandboxJSON
		decode(t, resp, &c)
		if c.SandboxID != id || c.EnvdAccessToken != "token-1" || c.ClientID == "" {
			t.Fatalf("connect answer: %+v", c)
		}
	}
	if resp := h.api("POST", "/v2/sandboxes/"+id+"/connect", nil); resp.StatusCode != 200 {
		t.Fatalf("connect with no body: %d", resp.StatusCode)
	}

	wantError(t, h.api("POST", "/sandboxes/"+id+"/resume", nil), 409)
	if resp := h.api("POST", "/sandboxes/"+id+"/pause", map[string]bool{"memory": true}); resp.StatusCode != 204 {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	wantError(t, h.api("POST", "/sandboxes/"+id+"/pause", nil), 409)
	var detail sandboxDetailJSON
	decode(t, h.api("GET", "/sandboxes/"+id, nil), &detail)
	if detail.State != "paused" || detail.EnvdAccessToken != "" {
		t.Fatalf("detail of a paused sandbox: state %q, token %q", detail.State, detail.EnvdAccessToken)
	}
	if resp := h.api("POST", "/v2/sandboxes/"+id+"/connect", nil); resp.StatusCode != 201 {
		t.Fatalf("connect to a paused sandbox: %d, want 201 (resumed)", resp.StatusCode)
	}
	resp := h.api("POST", "/sandboxes/"+id+"/fork", map[string]int{"count": 2})
	var forks []forkResultJSON
	decode(t, resp, &forks)
	if resp.StatusCode != 201 || len(forks) != 2 || forks[0].Sandbox == nil || forks[0].Sandbox.SandboxID == id {
		t.Fatalf("fork: %d %+v", resp.StatusCode, forks)
	}
	if resp := h.api("POST", "/sandboxes/"+id+"/refreshes", map[string]int{"duration": 30}); resp.StatusCode != 204 {
		t.Fatalf("refresh: %d", resp.StatusCode)
	}

	if resp := h.api("DELETE", "/sandboxes/"+id, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	for _, c := range []struct{ method, path string }{
		{"DELETE", "/sandboxes/" + id}, {"GET", "/sandboxes/" + id}, {"POST", "/sandboxes/" + id + "/timeout"},
		{"POST", "/sandboxes/" + id + "/connect"}, {"POST", "/v2/sandboxes/" + id + "/connect"},
		{"POST", "/sandboxes/" + id + "/pause"},
		{"PUT", "/sandboxes/" + id + "/network"}, {"GET", "/sandboxes/nosuchsandbox"},
	} {
		wantError(t, h.api(c.method, c.path, map[string]int{"timeout": 10}), 404)
	}
	wantError(t, h.api("GET", "/sandboxes/"+id+"/no/such/route", nil), 404)
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	id := h.create(nil).SandboxID
	var ms []metricJSON
	decode(t, h.api("GET", "/sandboxes/"+id+"/metrics", nil), &ms)
	if len(ms) != 2 {
		t.Fatalf("metrics: %+v", ms)
	}
	m := ms[0]
	if m.CPUCount != 2 || m.CPUUsedPct != 12.5 || m.MemTotal != 512<<20 || m.MemUsed != 20<<20 || m.MemCache != 5<<20 ||
		m.DiskUsed != 8<<20 || m.DiskTotal != 1<<30 || m.TimestampUnix != base.Unix() || !m.Timestamp.Equal(base) {
		t.Fatalf("metric: %+v", m)
	}
	// start and end are unix seconds, both ends included.
	for _, c := range []struct {
		query string
		n     int
	}{
		{fmt.Sprintf("start=%d", base.Unix()+1), 1},
		{fmt.Sprintf("end=%d", base.Unix()), 1},
		{fmt.Sprintf("start=%d&end=%d", base.Unix(), base.Unix()+5), 2},
		{fmt.Sprintf("start=%d", base.Unix()+6), 0},
	} {
		decode(t, h.api("GET", "/sandboxes/"+id+"/metrics?"+c.query, nil), &ms)
		if len(ms) != c.n {
			t.Errorf("%s: %d samples, want %d", c.query, len(ms), c.n)
		}
	}
	wantError(t, h.api("GET", "/sandboxes/"+id+"/metrics?start=yesterday", nil), 400)
	wantError(t, h.api("GET", "/sandboxes/nosuchsandbox/metrics", nil), 404)

	var batch struct {
		Sandboxes map[string]metricJSON `json:"sandboxes"`
	}
	decode(t, h.api("GET", "/sandboxes/metrics?sandbox_ids="+id+",nosuch", nil), &batch)
	if len(batch.Sandboxes) != 1 || batch.Sandboxes[id].CPUUsedPct != 99.5 {
		t.Fatalf("batch metrics: %+v", batch)
	}
	wantError(t, h.api("GET", "/sandboxes/metrics", nil), 400)
}

func TestLogs(t *testing.T) {
	h := newHarness(t)
	id := h.create(nil).SandboxID
	var v2 struct {
		Logs []struct {
			Timestamp time.Time         `json:"timestamp"`
			Level     string            `json:"level"`
			Message   string            `json:"message"`
			Fields    map[string]string `json:"fields"`
		} `json:"logs"`
	}
	decode(t, h.api("GET", "/v2/sandboxes/"+id+"/logs?cursor=1767323045123&limit=10&direction=backward&level=warn&search=pid", nil), &v2)
	if len(v2.Logs) != 2 || v2.Logs[1].Message != "Process with pid 7 started" || v2.Logs[1].Fields["source"] != "agent" || v2.Logs[0].Level != "info" {
		t.Fatalf("v2 logs %+v", v2)
	}
	h.tel.mu.Lock()
	q := h.tel.query
	h.tel.mu.Unlock()
	if !q.Cursor.Equal(time.UnixMilli(1767323045123)) || q.Limit != 10 || !q.Backward || q.Level != "warn" || q.Search != "pid" {
		t.Errorf("query %+v", q)
	}
	decode(t, h.api("GET", "/v2/sandboxes/"+id+"/logs", nil), &v2)
	h.tel.mu.Lock()
	q = h.tel.query
	h.tel.mu.Unlock()
	if !q.Cursor.IsZero() || q.Limit != 1000 || q.Backward || q.Level != "" {
		t.Errorf("default query %+v", q)
	}
	var v1 struct {
		Logs []struct {
			Timestamp time.Time `json:"timestamp"`
			Line      string    `json:"line"`
		} `json:"logs"`
		LogEntries []map[string]any `json:"logEntries"`
	}
	decode(t, h.api("GET", "/sandboxes/"+id+"/logs?start=0&limit=5", nil), &v1)
	if len(v1.Logs) != 2 || len(v1.LogEntries) != 2 {
		t.Fatalf("v1 logs %+v", v1)
	}
	var line map[string]string
	if err := json.Unmarshal([]byte(v1.Logs[1].Line), &line); err != nil || line["message"] != "Process with pid 7 started" || line["pid"] != "7" || line["level"] != "info" {
		t.Errorf("v1 line %q", v1.Logs[1].Line)
	}
	for _, bad := range []string{"direction=sideways", "level=loud", "cursor=soon", "limit=5000"} {
		wantError(t, h.api("GET", "/v2/sandboxes/"+id+"/logs?"+bad, nil), 400)
	}
	wantError(t, h.api("GET", "/v2/sandboxes/nosuchsandbox/logs", nil), 404)
	wantError(t, h.api("GET", "/sandboxes/nosuchsandbox/logs", nil), 404)
}

func TestListV2(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := range 5 {
		md := map[string]string{"suite": "a b&c=d/é", "i": fmt.Sprint(i)}
		ids = append(ids, h.create(map[string]any{"templateID": "base", "metadata": md}).SandboxID)
	}
	h.create(map[string]any{"templateID": "base", "metadata": map[string]string{"suite": "other"}})
	h.api("DELETE", "/sandboxes/"+ids[4], nil)
	ids = ids[:4]

	// The SDKs percent-encode each key and value, then the pairs, then the
	// query parameter itself.
	md := url.Values{url.QueryEscape("suite"): {url.QueryEscape("a b&c=d/é")}}.Encode()
	for _, order := range []string{"asc", "desc"} {
		var got []string
		next := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			q := url.Values{"metadata": {md}, "limit": {"3"}, "order": {order}, "state": {"running,paused"}}
			if next != "" {
				q.Set("nextToken", next)
			}
			resp := h.api("GET", "/v2/sandboxes?"+q.Encode(), nil)
			var page []listedSandboxJSON
			decode(t, resp, &page)
			for _, s := range page {
				if s.State != "running" || s.ClientID == "" || s.EnvdVersion == "" || s.StartedAt.IsZero() || s.CPUCount == 0 {
					t.Fatalf("listed sandbox: %+v", s)
				}
				got = append(got, s.SandboxID)
			}
			if next = resp.Header.Get("X-Next-Token"); next == "" {
				break
			}
		}
		want := ids
		if order == "desc" {
			want = []string{ids[3], ids[2], ids[1], ids[0]}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("order %s: %v, want %v", order, got, want)
		}
	}

	var page []listedSandboxJSON
	decode(t, h.api("GET", "/v2/sandboxes?state=paused", nil), &page)
	if len(page) != 0 {
		t.Fatalf("paused: %+v", page)
	}
	decode(t, h.api("GET", "/v2/sandboxes?state=running&state=paused&metadata="+url.QueryEscape("i=2"), nil), &page)
	if len(page) != 1 || page[0].SandboxID != ids[2] {
		t.Fatalf("metadata i=2: %+v", page)
	}
	after := base.Add(2*time.Second + time.Millisecond).Format(time.RFC3339Nano)
	decode(t, h.api("GET", "/v2/sandboxes?order=asc&startedAfter="+url.QueryEscape(after), nil), &page)
	if len(page) != 3 || page[0].SandboxID != ids[2] {
		t.Fatalf("startedAfter: %d sandboxes", len(page))
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "state=dead", "order=up", "startedAfter=today", "nextToken=garbage!"} {
		wantError(t, h.api("GET", "/v2/sandboxes?"+q, nil), 400)
	}

	var v1 []listedSandboxJSON
	decode(t, h.api("GET", "/sandboxes?metadata="+url.QueryEscape(md), nil), &v1)
	if len(v1) != 4 {
		t.Fatalf("v1 list: %d", len(v1))
	}
}

func TestParseMetadataQuery(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"":            nil,
		"a=1&b=2":     {"a": "1", "b": "2"},
		"a%3Db=c%26d": {"a=b": "c&d"},
		"k=a%2520b":   {"k": "a b"},
	} {
		got, err := parseMetadataQuery(in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
}

// TestUnsupportedOptions: what the SDKs can send and spaced does not act on
// is a 501 that names it, on create and on the network update, and nothing
// is made or changed; the same fields sent as null pass.
func TestUnsupportedOptions(t *testing.T) {
	h := newHarness(t)
	sb := h.create(nil)
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		want       string // in the message; "" for a create that passes
	}{
		// The SDKs start the MCP gateway themselves after create.
		{"mcp", `{"templateID":"base","mcp":{"time":{}}}`, nil, ""},
		{"mcp null", `{"templateID":"base","mcp":null}`, nil, ""},
		{"iam", `{"templateID":"base","iam":{"tokens":{"aws":{}}}}`, nil, "workload identity"},
		{"idempotency key", `{"templateID":"base"}`, map[string]string{"Idempotency-Key": "k-1"}, "Idempotency-Key"},
		{"egress proxy", `{"templateID":"base","network":{"egressProxy":{"address":"proxy.example:1080"}}}`, nil, "network.egressProxy"},
		{"egress proxy null", `{"templateID":"base","network":{"egressProxy":null}}`, nil, ""},
		{"dns servers", `{"templateID":"base","network":{"dnsServers":["1.1.1.1"]}}`, nil, "network.dnsServers"},
		{"no dns servers", `{"templateID":"base","network":{"dnsServers":[]}}`, nil, "network.dnsServers"},
		{"mask request host", `{"templateID":"base","network":{"maskRequestHost":"${PORT}-app.example"}}`, nil, "network.maskRequestHost"},
		{"https ports", `{"templateID":"base","network":{"httpsPorts":[3000]}}`, nil, "network.httpsPorts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"X-API-KEY": testKey}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			before := len(h.fake.creates)
			resp := h.do("POST", "/v2/sandboxes", tc.body, hdr)
			if tc.want == "" {
				if resp.StatusCode != 201 {
					t.Fatalf("create: %d %s", resp.StatusCode, readAll(resp))
				}
				return
			}
			if e := wantError(t, resp, 501); !strings.Contains(e.Message, tc.want) || !strings.Contains(e.Message, "not supported by") {
				t.Errorf("message %q, want it to name %q and say spaced does not support it", e.Message, tc.want)
			}
			if len(h.fake.creates) != before {
				t.Errorf("a refused create reached the sandbox service: %+v", h.fake.creates[before:])
			}
		})
	}
	// The network update refuses the same fields and keeps the policy.
	for _, body := range []string{`{"egressProxy":{"address":"p:1080"}}`, `{"dnsServers":[]}`, `{"allowOut":["8.8.8.8"],"httpsPorts":[443]}`} {
		if e := wantError(t, h.api("PUT", "/sandboxes/"+sb.SandboxID+"/network", body), 501); !strings.Contains(e.Message, "not supported by spaced") {
			t.Errorf("update %s: message %q", body, e.Message)
		}
	}
	var d sandboxDetailJSON
	decode(t, h.api("GET", "/sandboxes/"+sb.SandboxID, nil), &d)
	if d.Network != nil && len(d.Network.AllowOut) > 0 {
		t.Errorf("a refused update changed the policy: %+v", d.Network)
	}
	// Where a cluster's forwarder keeps the keys, a keyed create passes.
	clustered := newHarness(t, func(o *Options) { o.IdempotencyKeys = true })
	if resp := clustered.do("POST", "/v2/sandboxes", `{"templateID":"base"}`, map[string]string{"X-API-KEY": testKey, "Idempotency-Key": "k-1"}); resp.StatusCode != 201 {
		t.Errorf("a keyed create behind the cluster's forwarder: %d %s", resp.StatusCode, readAll(resp))
	}
}

// set_timeout(0) ends the sandbox's life now, as E2B's spec (minimum 0)
// and SDKs have it; it was refused with 400.
func TestSetTimeoutZeroEndsNow(t *testing.T) {
	h := newHarness(t)
	id := h.create(nil).SandboxID
	if resp := h.api("POST", "/sandboxes/"+id+"/timeout", map[string]int{"timeout": 0}); resp.StatusCode != 204 {
		t.Fatalf("timeout 0: %d", resp.StatusCode)
	}
	wantError(t, h.api("POST", "/sandboxes/"+id+"/timeout", map[string]int{"timeout": 60}), 404)
}
