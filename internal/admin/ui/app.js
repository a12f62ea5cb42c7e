// app.js is the live part of rustle's admin page. The page itself is
// rendered by the admin listener and readable without this script; the
// script polls the JSON API (the one documented for other clients) every
// two seconds while the page is visible, draws the charts as inline SVG,
// redraws the tables and sends the actions. Hand-written, no framework,
// no build step.
'use strict';

(() => {
  const POLL_MS = 2000;
  const CHART_W = 600;
  const CHART_H = 120;
  const SVG = 'http://www.w3.org/2000/svg';

  document.documentElement.classList.add('js');

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

  const state = { seq: 0, times: [], series: {}, interval: 1000, window: 3600, ticks: 0, timer: 0 };

  // api GETs or POSTs path and returns the JSON answer; an answer that
  // is not 2xx throws its error line.
  async function api(path, opts = {}) {
    const resp = await fetch(path, { credentials: 'same-origin', cache: 'no-store', ...opts });
    let body = null;
    try {
      body = await resp.json();
    } catch {
      // not JSON: a refusal of the admin listener (text)
    }
    if (!resp.ok) throw new Error(body && body.error ? body.error : `${resp.status} ${resp.statusText}`);
    return body;
  }

  function post(path, body) {
    return api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  }

  const fmtCount = (n) => Number(n).toLocaleString('en-US');

  function fmtBytes(n) {
    if (n < 1024) return `${Math.round(n)} B`;
    const units = 'KMGTPE';
    let i = -1;
    do {
      n /= 1024;
      i++;
    } while (n >= 1024 && i < units.length - 1);
    return `${n.toFixed(1)} ${units[i]}iB`;
  }

  function fmtRate(v, unit) {
    if (unit === 'bytes') return `${fmtBytes(v)}/s`;
    return v >= 100 ? `${Math.round(v)}/s` : `${Number(v.toFixed(2))}/s`;
  }

  function fmtTime(s) {
    const d = new Date(s);
    if (Number.isNaN(d.getTime()) || d.getTime() <= 0) return '-';
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function setText(sel, text, title) {
    const el = typeof sel === 'string' ? $(sel) : sel;
    if (!el) return;
    el.textContent = text;
    if (title !== undefined) el.title = title;
  }

  // el makes an element with attributes and children (strings become
  // text: nothing from the API is parsed as HTML).
  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }

  const num = (v) => el('td', { class: 'n' }, v);

  function fillBody(table, rows, cols, empty) {
    const tbody = $(`${table} tbody`);
    if (!tbody) return;
    if (rows.length === 0) rows = [el('tr', {}, el('td', { class: 'empty', colSpan: cols }, empty))];
    tbody.replaceChildren(...rows);
  }

  // ---- summary ----

  function renderSummary(s) {
    setText('#instance', s.instance);
    setText('#version', s.version);
    setText('#started', fmtTime(s.started));
    setText('#workers', s.workers);
    setText('#access-log', s.access_log);
    setText('#cluster', s.cluster ? `quotas shared through Redis, ${s.redis_up ? 'in sync' : 'Redis unreachable: counting locally'}` : 'none');
    const r = s.last_reload;
    setText('#last-reload', r ? `${r.ok ? 'ok' : `refused: ${r.error}`} · ${fmtTime(r.at)} · ${r.by}` : 'none since start');
    setText('#you', s.you || 'loopback, no admin_access');
    fillBody('#listeners', s.listeners.map((l) =>
      el('tr', {}, el('td', {}, l.name), el('td', {}, l.protocol), el('td', {}, l.address), el('td', {}, l.auth),
        el('td', {}, l.http3 ? 'yes' : 'no'))), 5, 'no listener');
  }

  // ---- traffic ----

  function mergeTraffic(t) {
    state.interval = t.interval_ms || 1000;
    const keep = Math.ceil((3600 * 1000) / state.interval);
    const old = state.times.length;
    if (t.seq < state.seq) { // the ring is another's: start over
      state.times = [];
      state.series = {};
    }
    state.seq = t.seq;
    state.times.push(...t.times);
    const names = new Set([...Object.keys(state.series), ...Object.keys(t.series)]);
    for (const name of names) {
      const have = state.series[name] || new Array(old).fill(0);
      const add = t.series[name] || new Array(t.times.length).fill(0);
      have.push(...add);
      state.series[name] = have;
    }
    const drop = state.times.length - keep;
    if (drop > 0) {
      state.times.splice(0, drop);
      for (const name of names) state.series[name].splice(0, drop);
    }
  }

  function drawCharts() {
    // The window ends at the last sample; it starts at the first sample
    // when rustle has run for less than the window.
    const last = state.times.length ? state.times[state.times.length - 1] : Date.now();
    const first = state.times.length ? state.times[0] : last;
    const from = Math.max(last - state.window * 1000, Math.min(first, last - 10 * state.interval));
    const span = Math.max(last - from, 1);
    for (const fig of $$('figure[data-chart]')) {
      const prefix = fig.dataset.chart;
      const unit = fig.dataset.unit;
      const level = fig.dataset.level === '1';
      const names = Object.keys(state.series).filter((n) => n.startsWith(prefix)).sort();
      let start = state.times.findIndex((t) => t >= from);
      if (start < 0) start = state.times.length;
      let peak = 0;
      for (const n of names) for (let i = start; i < state.times.length; i++) peak = Math.max(peak, state.series[n][i]);
      const top = peak > 0 ? peak : 1;
      const svg = $('svg', fig);
      const parts = [];
      const grid = document.createElementNS(SVG, 'path');
      grid.setAttribute('class', 'grid');
      grid.setAttribute('d', `M0 ${CHART_H - 0.5}H${CHART_W}M0 ${CHART_H / 2}H${CHART_W}`);
      parts.push(grid);
      const legend = [];
      names.forEach((n, k) => {
        const pts = [];
        const values = state.series[n];
        for (let i = start; i < state.times.length; i++) {
          const x = ((state.times[i] - from) / span) * CHART_W;
          const y = CHART_H - 2 - (values[i] / top) * (CHART_H - 6);
          pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
        }
        const line = document.createElementNS(SVG, 'polyline');
        line.setAttribute('class', `s${k % 6}`);
        line.setAttribute('points', pts.join(' '));
        parts.push(line);
        const now = values.length ? values[values.length - 1] : 0;
        const label = n.slice(prefix.length);
        legend.push(el('li', {}, el('span', { class: `swatch s${k % 6}` }), `${label} ${level ? fmtCount(now) : fmtRate(now, unit)}`));
      });
      if (names.length === 0) legend.push(el('li', { class: 'empty' }, 'nothing yet'));
      else legend.push(el('li', { class: 'peak' }, `peak ${level ? fmtCount(peak) : fmtRate(peak, unit)}`));
      svg.replaceChildren(...parts);
      $('.legend', fig).replaceChildren(...legend);
    }
  }

  function renderTotals(t) {
    setText('#total-requests', fmtCount(t.requests));
    setText('#total-tunnels', fmtCount(t.tunnels));
    setText('#total-bytes-up', fmtBytes(t.bytes_up), String(t.bytes_up));
    setText('#total-bytes-down', fmtBytes(t.bytes_down), String(t.bytes_down));
    setText('#open-connections', fmtCount(t.connections_open));
    setText('#open-tunnels', fmtCount(t.tunnels_open));
    setText('#total-refusals', fmtCount(t.refusals_total));
    setText('#refusals-from', t.refusals_from === 'metrics' ? '(from the metrics: the access log is off)' : '(from the access log)');
    const refusals = Object.entries(t.refusals).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    fillBody('#refusals', refusals.map(([r, n]) => el('tr', { 'data-reason': r }, el('td', {}, r), num(fmtCount(n)))), 2, 'none');
    const statuses = Object.entries(t.status).filter(([, n]) => n > 0).sort();
    fillBody('#statuses', statuses.map(([s, n]) => el('tr', { 'data-status': s }, el('td', {}, s), num(fmtCount(n)))), 2, 'none');
    const protos = Object.entries(t.protocols).sort();
    fillBody('#protocols', protos.map(([p, c]) => el('tr', { 'data-protocol': p }, el('td', {}, p), num(fmtCount(c.requests)),
      num(fmtCount(c.tunnels)), num(fmtBytes(c.bytes_up)), num(fmtBytes(c.bytes_down)), num(fmtCount(c.connections_open)))), 6, 'none');
  }

  // ---- users, quotas, parents ----

  function quotaText(q) {
    const parts = [];
    if (q.requests_limit) parts.push(`${fmtCount(q.requests_used)}/${fmtCount(q.requests_limit)} req`);
    if (q.bytes_limit) parts.push(`${fmtBytes(q.bytes_used)}/${fmtBytes(q.bytes_limit)}`);
    return `${q.rule}: ${parts.join(' ')}`;
  }

  function renderUsers(u) {
    $('#per-user-off').hidden = u.per_user;
    for (const [id, rows] of [['#users-by-bytes', u.by_bytes], ['#users-by-requests', u.by_requests]]) {
      fillBody(id, rows.map((r) => el('tr', { 'data-user': r.name },
        el('td', {}, r.name), el('td', { class: 'n req' }, fmtCount(r.requests)), num(fmtBytes(r.bytes_up)), num(fmtBytes(r.bytes_down)),
        el('td', { class: 'quota' }, ...r.quotas.map((q) => el('span', { title: `resets ${fmtTime(q.reset)}` }, quotaText(q)))),
        el('td', {}, r.name === '_other' ? '' : el('button', { type: 'button', 'data-revoke': r.name }, 'Revoke')))), 6, 'nobody yet');
    }
  }

  function renderQuotas(q) {
    setText('#quota-count', `${q.count} counters${q.cluster ? `, totals of every instance (Redis ${q.redis_up ? 'in sync' : 'unreachable'})` : ''}`);
    fillBody('#quotas', q.counters.map((c) => {
      const meter = el('meter', { min: 0, max: 1, low: 0.75, high: 0.95, optimum: 0, value: Math.min(c.used, 1) });
      return el('tr', { 'data-rule': c.rule, 'data-scope': c.scope, class: c.used >= 1 ? 'spent' : '' },
        el('td', {}, c.rule), el('td', {}, c.scope), el('td', {}, meter),
        num(c.requests_limit ? `${fmtCount(c.requests_used)} / ${fmtCount(c.requests_limit)}` : fmtCount(c.requests_used)),
        num(c.bytes_limit ? `${fmtBytes(c.bytes_used)} / ${fmtBytes(c.bytes_limit)}` : fmtBytes(c.bytes_used)),
        el('td', {}, fmtTime(c.reset)),
        el('td', {}, q.cluster ? '' : el('button', { type: 'button', 'data-reset-rule': c.rule, 'data-reset-scope': c.scope }, 'Reset')));
    }), 7, 'no quota counted yet');
  }

  function renderParents(p) {
    fillBody('#parents', p.parents.map((r) => el('tr', { 'data-parent': r.name, class: r.up ? 'up' : 'down' },
      el('td', {}, r.name), el('td', { class: 'state' }, r.up ? 'up' : 'down'), num(fmtCount(r.requests)),
      num(fmtCount(r.failures)), num(`${r.dial_ms.toFixed(1)} ms`))), 5, 'no parent proxy');
  }

  // ---- access log ----

  function logQuery() {
    const q = new URLSearchParams();
    for (const input of $$('#log-filter input')) if (input.value.trim()) q.set(input.name, input.value.trim());
    return q;
  }

  function renderLog(l) {
    $('#log-off').hidden = l.enabled;
    $('#log-lines').replaceChildren(...l.records.map((r) => el('li', { class: r.reason ? 'refused' : '' }, el('code', {}, r.line))));
  }

  // ---- polling ----

  async function refresh() {
    const jobs = [
      api(`/api/traffic?since=${state.seq}`).then((t) => { mergeTraffic(t); renderTotals(t.totals); drawCharts(); }),
      api('/api/users').then(renderUsers),
      api('/api/quotas').then(renderQuotas),
      api('/api/parents').then(renderParents),
      api(`/api/log?${logQuery()}`).then(renderLog),
    ];
    if (state.ticks++ % 5 === 0) jobs.push(api('/api/summary').then(renderSummary));
    const results = await Promise.allSettled(jobs);
    const failed = results.find((r) => r.status === 'rejected');
    document.body.classList.toggle('stale', !!failed);
    if (failed) document.body.dataset.error = failed.reason.message;
    else delete document.body.dataset.error;
    document.body.dataset.updated = String(Date.now());
  }

  function schedule(ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(async () => {
      if (!document.hidden) {
        try {
          await refresh();
        } catch (e) {
          document.body.dataset.error = String(e);
        }
      }
      schedule(POLL_MS);
    }, ms);
  }

  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) schedule(0); // at once when the page is shown again; nothing while hidden
  });

  // ---- actions ----

  function showResult(ok, text) {
    const out = $('#action-result');
    out.className = ok ? 'ok' : 'err';
    out.textContent = text;
  }

  async function act(question, path, body) {
    if (!window.confirm(question)) return;
    try {
      const r = await post(path, body);
      showResult(true, r.done);
    } catch (e) {
      showResult(false, e.message);
    }
    state.ticks = 0; // the summary too: a reload changes it
    schedule(0);
  }

  document.addEventListener('click', (ev) => {
    const b = ev.target.closest('button');
    if (!b) return;
    if (b.dataset.revoke !== undefined) {
      act(`End every session and tunnel of ${b.dataset.revoke}?`, '/api/revoke', { user: b.dataset.revoke });
    } else if (b.dataset.resetRule !== undefined) {
      act(`Reset quota ${b.dataset.resetRule} of ${b.dataset.resetScope} to zero?`, '/api/quota/reset',
        { rule: b.dataset.resetRule, scope: b.dataset.resetScope });
    } else if (b.id === 'reload') {
      act('Reload the configuration file?', '/api/reload', {});
    } else if (b.dataset.window) {
      state.window = Number(b.dataset.window);
      for (const w of $$('button[data-window]')) w.classList.toggle('on', w === b);
      drawCharts();
    }
  });

  $('#revoke-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const user = ev.target.elements.user.value.trim();
    if (user) act(`End every session and tunnel of ${user}?`, '/api/revoke', { user });
  });

  $('#log-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = logQuery().toString();
    history.replaceState(null, '', q ? `?${q}` : location.pathname);
    api(`/api/log?${q}`).then(renderLog, (e) => showResult(false, e.message));
  });

  schedule(0);
})();
