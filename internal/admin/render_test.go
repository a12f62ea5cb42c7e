package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/quota"
)

func TestRenderPage(t *testing.T) {
	const hostile = `<script>alert("x")</script>&'`
	d := &pageData{
		Summary: &Summary{Version: hostile, Instance: hostile, Started: time.Unix(0, 0), Cluster: true,
			RunInfo:    RunInfo{Workers: 2, AccessLog: hostile, Listeners: []ListenerInfo{{Name: hostile, Protocol: "http", Address: "127.0.0.1:1", HTTP3: true}}},
			LastReload: &ReloadResult{Error: hostile, By: hostile}, You: hostile, CanReload: true},
		Totals: Totals{Requests: 12345, BytesUp: 2048, Refusals: map[string]uint64{"quota": 2, hostile: 1, "auth": 3},
			Status: map[string]uint64{"2xx": 5, "4xx": 0}, Protocols: map[string]ProtocolTotals{"http": {Requests: 1}}},
		Users:   &Users{PerUser: true, ByBytes: []UserRow{{Name: hostile, Quotas: []quota.Status{{Rule: hostile, BytesLimit: 10, BytesUsed: 5}}}}},
		Quotas:  &Quotas{Count: 1, Counters: []QuotaRow{{Status: quota.Status{Rule: hostile, Scope: hostile, RequestsUsed: 3, RequestsLimit: 3}, Used: 1}}},
		Parents: &Parents{Parents: []ParentRow{{Name: hostile, Up: false, DialMS: 1.25}}},
		Log:     &Log{Enabled: true, Records: []LogRecord{{Line: hostile, Reason: "quota"}}},
		Filter:  LogFilter{User: `"><script>`, Host: hostile},
	}
	page := string(renderPage(d))
	for _, bad := range []string{"<script>", "{{", "}}"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q:\n%s", bad, page)
		}
	}
	for _, want := range []string{
		`<b id="total-requests">12,345</b>`,
		`title="2048">2.0 KiB</span>`,
		`<dd id="cluster">quotas shared through Redis, Redis unreachable: counting locally</dd>`,
		`<button id="reload"`,
		`<td>yes</td></tr>`,
		`<tr data-reason="&lt;script&gt;`,
		`<tr data-status="2xx">`,
		`class="spent"`,
		`value="1"></meter>`,
		`class="down"><td>&lt;script&gt;`,
		`<td class="n">1.2 ms</td>`,
		`<li class="refused"><code>&lt;script&gt;`,
		`<p id="per-user-off" class="note" hidden>`,
		`<p id="log-off" class="note" hidden>`,
		`value="&#34;&gt;&lt;script&gt;"`,
		`<span>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#39;: 5 B/10 B</span>`,
		`<table id="users-by-requests" class="users">`,
		`<tr><td colspan="6" class="empty">nobody yet</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, `data-status="4xx"`) {
		t.Error("a status class with no answer is listed")
	}
	// The refusals are listed by reason in order.
	if a, q := strings.Index(page, `data-reason="auth"`), strings.Index(page, `data-reason="quota"`); a < 0 || q < a {
		t.Errorf("refusals not in order: auth at %d, quota at %d", a, q)
	}
}
