// Pulse dashboard: reads the query service's API with the credential pasted into the
// page (kept in sessionStorage, sent only as Authorization: Bearer). EventSource cannot
// send headers, so the change feed is opened with a single-use ticket that
// POST /v1/watch/tickets issues for the credential: the credential is never in a URL.
// Charts are plain SVG. Every failure is shown as such, never as a zero.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const STORE = 'pulse.dashboard.credential';
  const S = { cred: sessionStorage.getItem(STORE) || '', role: null, sub: '' };
  const svgNS = 'http://www.w3.org/2000/svg';

  // ---- API ----------------------------------------------------------------------

  class APIError extends Error {
    constructor(status, code, message, field) {
      super(message);
      this.status = status;
      this.code = code;
      this.field = field || '';
    }
  }

  async function api(path, method) {
    const headers = { Accept: 'application/json' };
    if (S.cred) headers.Authorization = 'Bearer ' + S.cred;
    let res;
    try {
      res = await fetch(path, { method: method || 'GET', headers, cache: 'no-store' });
    } catch (e) {
      throw new APIError(0, 'network', 'the query service did not answer');
    }
    let body = null;
    try { body = await res.json(); } catch (e) { /* not JSON */ }
    if (!res.ok) {
      const e = (body && body.error) || {};
      throw new APIError(res.status, e.code || '', e.message || res.statusText, e.field);
    }
    return body;
  }

  const isOperator = () => S.role === 'operator';
  const opView = (sep) => (isOperator() ? sep + 'view=operator' : '');
  const enc = encodeURIComponent;

  // unavailable says whether err means the data is out of reach for now (a 5xx or no
  // answer), as opposed to a refusal or a bad request.
  const unavailable = (err) => !(err instanceof APIError) || err.status === 0 || err.status >= 500;

  function setState(el, text, bad) {
    el.textContent = text || '';
    el.classList.toggle('bad', !!bad);
  }

  // GROUP_LIST is how many present members of a group the Now view lists.
  const GROUP_LIST = 200;

  // groupProblem is what the Now view says when a read of a group (what: counts or
  // members) failed: query's own message for a bad group id or a refusal.
  function groupProblem(err, what) {
    if (err.status === 400 && err.field === 'groupId') return 'bad group id: ' + err.message;
    if (err.status === 401 || err.status === 403) return 'refused: ' + err.message;
    return what + ' unavailable: ' + err.message;
  }

  // historyProblem is what a history panel says when its read failed.
  function historyProblem(err) {
    if (unavailable(err)) return 'history unavailable: ' + err.message;
    if (err.status === 403) return 'needs a key with the operator scope: ' + err.message;
    if (err.status === 401) return 'the credential was refused: ' + err.message;
    return err.message;
  }

  // ---- time and numbers -----------------------------------------------------------

  const pad = (n) => String(n).padStart(2, '0');
  const todayUTC = () => new Date().toISOString().slice(0, 10);
  const dayStart = (d) => new Date(d + 'T00:00:00Z');
  const addDays = (d, n) => new Date(dayStart(d).getTime() + n * 86400e3).toISOString().slice(0, 10);
  const hhmm = (t) => pad(t.getUTCHours()) + ':' + pad(t.getUTCMinutes());
  const hhmmss = (t) => hhmm(t) + ':' + pad(t.getUTCSeconds());
  // custom is a custom status as the API gives it: emoji and text, and until when.
  function custom(d) {
    if (!d) return '\u2014';
    const s = [d.emoji, d.text].filter(Boolean).join(' ');
    return d.until ? s + ' (until ' + when(d.until) + ')' : s;
  }

  function when(s) {
    if (!s) return '—';
    const t = new Date(s);
    const day = t.toISOString().slice(0, 10);
    return (day === todayUTC() ? '' : day + ' ') + hhmmss(t) + ' UTC';
  }
  const fmtN = (n) => (n == null ? '—' : Number(n).toLocaleString('en-US'));
  function fmtDur(sec) {
    if (sec == null || isNaN(sec)) return '—';
    if (sec === 0) return '0';
    if (sec < 1) return Math.round(sec * 1000) + ' ms';
    if (sec < 120) return sec.toFixed(sec < 10 ? 1 : 0) + ' s';
    const h = Math.floor(sec / 3600), m = Math.round((sec % 3600) / 60);
    return h ? h + ' h ' + m + ' min' : m + ' min';
  }

  // ---- SVG charts -----------------------------------------------------------------

  function el(tag, attrs, text) {
    const e = document.createElementNS(svgNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 4, 8, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // lineChart draws series of [time ms, value] over [x0, x1], marking peak when given.
  function lineChart(box, { x0, x1, series, peak }) {
    box.textContent = '';
    const W = Math.max(box.clientWidth, 300), H = box.classList.contains('tall') ? 240 : 180;
    const L = 44, R = 10, T = 14, B = 20;
    const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img' });
    let max = 0;
    for (const s of series) for (const [, v] of s.points) max = Math.max(max, v);
    const ymax = niceMax(max);
    const x = (t) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
    const y = (v) => H - B - (v / ymax) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4;
      svg.append(el('line', { class: 'axis', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      svg.append(el('text', { x: L - 4, y: y(v) + 3, 'text-anchor': 'end' }, Number.isInteger(v) ? fmtN(v) : v.toFixed(1)));
    }
    const span = x1 - x0, ticks = span > 6 * 3600e3 ? 3 * 3600e3 : span > 3600e3 ? 3600e3 : 10 * 60e3;
    for (let t = Math.ceil(x0 / ticks) * ticks; t <= x1; t += ticks) {
      svg.append(el('text', { x: x(t), y: H - 5, 'text-anchor': 'middle' }, hhmm(new Date(t))));
    }
    for (const s of series) {
      if (!s.points.length) continue;
      const d = s.points.map(([t, v], i) => (i ? 'L' : 'M') + x(t).toFixed(1) + ' ' + y(v).toFixed(1)).join(' ');
      if (s.area) {
        const first = s.points[0][0], last = s.points[s.points.length - 1][0];
        svg.append(el('path', { class: 'area', d: `${d} L${x(last)} ${y(0)} L${x(first)} ${y(0)} Z` }));
      }
      svg.append(el('path', { class: 'line ' + (s.cls || ''), d }));
    }
    if (peak) {
      const px = x(peak.t), py = y(peak.v);
      svg.append(el('circle', { class: 'peak', cx: px, cy: py, r: 4 }));
      const anchor = px > W - 120 ? 'end' : 'start';
      svg.append(el('text', { class: 'peak-label', x: px + (anchor === 'end' ? -6 : 6), y: Math.max(py - 4, 10), 'text-anchor': anchor }, peak.label));
    }
    box.append(svg);
  }

  // barChart draws one bar per item ({label, value}).
  function barChart(box, items, fmt) {
    box.textContent = '';
    const W = Math.max(box.clientWidth, 300), H = 160, L = 44, R = 10, T = 14, B = 20;
    const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img' });
    const ymax = niceMax(Math.max(0, ...items.map((i) => i.value)));
    const y = (v) => H - B - (v / ymax) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4;
      svg.append(el('line', { class: 'axis', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      svg.append(el('text', { x: L - 4, y: y(v) + 3, 'text-anchor': 'end' }, fmt(v)));
    }
    const bw = (W - L - R) / Math.max(items.length, 1);
    const every = Math.ceil(items.length / 12);
    items.forEach((it, i) => {
      const bx = L + i * bw + bw * 0.15;
      const r = el('rect', { class: 'bar', x: bx, y: y(it.value), width: bw * 0.7, height: Math.max(0, y(0) - y(it.value)) });
      r.append(el('title', {}, it.label + ': ' + fmt(it.value)));
      svg.append(r);
      if (i % every === 0) svg.append(el('text', { x: bx + bw * 0.35, y: H - 5, 'text-anchor': 'middle' }, it.label.slice(5)));
    });
    box.append(svg);
  }

  function csvLink(a, name, header, rows) {
    const text = [header, ...rows].map((r) => r.join(',')).join('\n') + '\n';
    if (a.href) URL.revokeObjectURL(a.href);
    a.href = URL.createObjectURL(new Blob([text], { type: 'text/csv' }));
    a.download = name;
    a.hidden = false;
  }

  // ---- the change feed (server-sent events) -----------------------------------------

  // Feed keeps one EventSource open, reconnecting with the last cursor after a drop,
  // and shows its condition on badge. Every connection takes a fresh ticket (valid
  // once, for seconds), so the browser's own reconnects, which would reuse the URL,
  // are replaced by ours.
  class Feed {
    constructor(params, badge, on) {
      this.params = params;
      this.badge = badge;
      this.on = on;
      this.cursor = '';
      this.failures = 0;
      this.stopped = false;
      this.open();
    }
    show(text, cls) {
      this.badge.textContent = text;
      this.badge.className = 'badge ' + (cls || '');
    }
    retry() {
      this.failures++;
      this.show('reconnecting', 'bad');
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.open(), Math.min(1000 * this.failures, 10000));
    }
    async open() {
      if (this.stopped) return;
      const q = new URLSearchParams(this.params);
      if (this.cursor && this.failures < 2) q.set('cursor', this.cursor);
      this.show(this.failures ? 'reconnecting' : 'connecting', 'warn');
      if (S.cred) {
        try {
          q.set('ticket', (await api('/v1/watch/tickets', 'POST')).ticket);
        } catch (e) {
          this.retry();
          return;
        }
        if (this.stopped) return;
      }
      const es = (this.es = new EventSource('/v1/watch/sse?' + q));
      es.onopen = () => { this.failures = 0; this.show('live', 'live'); };
      const take = (type) => (ev) => {
        if (ev.lastEventId) this.cursor = ev.lastEventId;
        let m;
        try { m = JSON.parse(ev.data); } catch (e) { return; }
        this.failures = 0;
        this.show('live', 'live');
        if (this.on[type]) this.on[type](m);
      };
      es.addEventListener('snapshot', take('snapshot'));
      es.addEventListener('change', take('change'));
      es.addEventListener('error', (ev) => {
        if (ev.data) { // the server's error message; it closes the stream after it
          try { const m = JSON.parse(ev.data); if (m.code === 'cursor_expired') this.cursor = ''; } catch (e) { /* ignore */ }
          return;
        }
        // The ticket is spent: close, so the browser does not retry with it, and
        // reconnect with a new one.
        es.close();
        this.retry();
      });
    }
    stop() {
      this.stopped = true;
      clearTimeout(this.timer);
      if (this.es) this.es.close();
    }
  }

  // ---- views --------------------------------------------------------------------------

  // Each view's timers and feeds are stopped when another view is shown.
  let cleanups = [];
  const every = (ms, f) => { const id = setInterval(f, ms); cleanups.push(() => clearInterval(id)); };
  const keep = (feed) => { cleanups.push(() => feed.stop()); return feed; };
  function leave() { cleanups.forEach((f) => f()); cleanups = []; }

  function needCredential(stateEl) {
    if (!S.role && !S.cred) { setState(stateEl, 'paste a key or user token above', true); return true; }
    if (!S.role) { setState(stateEl, $('who').textContent === 'key refused' ? 'the credential was refused' : 'the query service did not answer; reload to try again', true); return true; }
    return false;
  }

  // Now: counts, the last hour, the latest changes; or, scoped to a group
  // (#now?group=<id>), the group's counts and its present members, read every second.
  const now = {
    counts: null,
    seq: 0,
    group: '',
    enter(arg, params) {
      const g = (this.group = params.get('group') || '');
      $('group-id').value = g;
      $('group-scope').textContent = g ? 'members of ' + g : 'counts of every user';
      $('label-registered').textContent = g ? 'members' : 'registered';
      $('group-panel').hidden = !g;
      $('now-all').hidden = !!g;
      $('group-users').textContent = '';
      setState($('group-state'), '');
      $('card-invisible').hidden = !isOperator();
      $('changes').textContent = '';
      this.render(null);
      if (needCredential($('counts-state'))) return;
      if (g) {
        // A user token may read the groups its user is a member of.
        this.refresh();
        every(1000, () => this.refresh());
        return;
      }
      if (S.role === 'user') {
        setState($('counts-state'), 'counts, history and the latest changes need an API key; a user token reads its own user (User view) and the groups it is a member of (group above)', true);
        return;
      }
      this.refresh();
      every(isOperator() ? 5000 : 1000, () => this.refresh());
      this.hour();
      every(60000, () => this.hour());
      cleanups.push(() => clearTimeout(this.hourRetry));
      if (isOperator()) {
        keep(new Feed({ firehose: 'true', view: 'operator' }, $('feed-state'), { change: (m) => this.change(m) }));
      } else {
        $('feed-state').textContent = 'needs an operator key';
        $('feed-state').className = 'badge';
        const li = document.createElement('li');
        li.textContent = 'Every user\u2019s changes (the firehose) need a key with the operator scope.';
        $('changes').append(li);
      }
    },
    render(c) {
      this.counts = c;
      const b = (c && c.byStatus) || {};
      $('count-online').textContent = c ? fmtN(b.online) : '—';
      $('count-idle').textContent = c ? fmtN(b.idle) : '—';
      $('count-invisible').textContent = c ? fmtN(b.invisible) : '—';
      $('count-total').textContent = c ? fmtN(c.total) : '—';
      $('count-registered').textContent = c ? fmtN(c.members != null ? c.members : c.registered) : '—';
      $('count-asof').textContent = c && c.asOf ? hhmmss(new Date(c.asOf)) + '.' + String(new Date(c.asOf).getUTCMilliseconds()).padStart(3, '0') : '—';
    },
    async refresh() {
      if (this.group) return this.refreshGroup();
      const seq = ++this.seq;
      try {
        const c = await api('/v1/online/count' + opView('?'));
        if (seq !== this.seq) return;
        this.render(c);
        setState($('counts-state'), '');
      } catch (e) {
        if (seq !== this.seq) return;
        this.render(null);
        setState($('counts-state'), 'counts unavailable: ' + e.message, true);
      }
    },
    // refreshGroup reads the group's counts and the first page of its present members.
    async refreshGroup() {
      const seq = ++this.seq, g = this.group, base = '/v1/groups/' + enc(g);
      const [c, l] = await Promise.allSettled([
        api(base + '/online/count' + opView('?')),
        api(base + '/online?limit=' + GROUP_LIST + opView('&')),
      ]);
      if (seq !== this.seq) return;
      if (c.status === 'fulfilled') {
        this.render(c.value);
        setState($('counts-state'), c.value.members ? '' : g + ' has no members');
      } else {
        this.render(null);
        setState($('counts-state'), groupProblem(c.reason, 'counts'), true);
      }
      const tb = $('group-users');
      tb.textContent = '';
      if (l.status === 'rejected') {
        // A refusal of the group is said once, above.
        const same = c.status === 'rejected' && c.reason.status === l.reason.status;
        setState($('group-state'), same ? '' : groupProblem(l.reason, 'members'), !same);
        return;
      }
      for (const u of l.value.users) {
        const tr = tb.insertRow();
        tr.dataset.user = u.userId;
        tr.dataset.status = u.status;
        const a = document.createElement('a');
        a.href = '#user/' + enc(u.userId);
        a.textContent = u.userId;
        tr.insertCell().append(a);
        const st = tr.insertCell();
        st.textContent = u.status;
        st.className = 'status ' + u.status;
      }
      const members = c.status === 'fulfilled' ? c.value.members : null;
      let note = '';
      if (!l.value.users.length) note = members === 0 ? '' : 'no member of ' + g + ' is present';
      else if (l.value.nextCursor) note = 'the first ' + fmtN(l.value.users.length) + ' present members';
      setState($('group-state'), note);
    },
    // change moves one user between the counts at once; a fresh read follows shortly.
    change(m) {
      const c = this.counts;
      if (c && c.byStatus) {
        const b = c.byStatus, present = (s) => s === 'online' || s === 'idle' || (s === 'invisible' && isOperator());
        if (m.previous in b) b[m.previous] = Math.max(0, b[m.previous] - 1);
        if (m.status in b) b[m.status] += 1;
        c.total += (present(m.status) ? 1 : 0) - (present(m.previous) ? 1 : 0);
        this.render(c);
      }
      clearTimeout(this.soon);
      this.soon = setTimeout(() => this.refresh(), 300);
      const li = document.createElement('li');
      li.className = 'fresh';
      li.dataset.user = m.userId;
      li.dataset.status = m.status;
      const t = document.createElement('span');
      t.className = 't';
      t.textContent = hhmmss(new Date(m.at));
      const u = document.createElement('a');
      u.href = '#user/' + enc(m.userId);
      u.textContent = m.userId;
      const s = document.createElement('span');
      s.className = 'status ' + m.status;
      s.textContent = m.status;
      if (m.status === m.previous) {
        // A change of the custom status alone.
        li.append(t, u, ' custom status ', m.data ? custom(m.data) : 'cleared', m.cause === 'timeout' ? ' (timeout)' : '');
      } else {
        li.append(t, u, ' ' + m.previous + ' \u2192 ', s, m.cause === 'timeout' ? ' (timeout)' : '');
      }
      const list = $('changes');
      list.prepend(li);
      while (list.children.length > 100) list.lastChild.remove();
    },
    async hour() {
      const to = new Date(), from = new Date(to.getTime() - 3600e3);
      try {
        const r = await api(`/v1/stats/concurrency?from=${enc(from.toISOString())}&to=${enc(to.toISOString())}&step=minute${opView('&')}`);
        setState($('hour-state'), r.points.length ? '' : 'no history rows in the last hour yet');
        const pts = r.points.map((p) => [Date.parse(p.at), p.closeOnline + p.closeIdle + (isOperator() ? p.closeInvisible : 0)]);
        lineChart($('hour-chart'), { x0: from.getTime(), x1: to.getTime(), series: [{ points: pts, area: true }] });
      } catch (e) {
        $('hour-chart').textContent = '';
        setState($('hour-state'), historyProblem(e), true);
        // Asked again soon (history's Retry-After is 5 s), so the chart comes back
        // once history does.
        clearTimeout(this.hourRetry);
        if (unavailable(e)) this.hourRetry = setTimeout(() => this.hour(), 5000);
      }
    },
  };

  // User: current status and devices, live; the day's sessions and timeline; the status
  // at any instant of the day.
  const user = {
    enter(arg, params) {
      const id = arg || '';
      const day = params.get('day') || todayUTC();
      $('user-id').value = id;
      $('user-day').value = day;
      for (const k of ['user-status', 'pit-status']) { $(k).textContent = '—'; $(k).className = 'status'; }
      for (const k of ['user-devices', 'user-sessions', 'user-timeline', 'user-bar']) $(k).textContent = '';
      $('user-custom').textContent = '\u2014';
      for (const k of ['user-state', 'pit-state', 'user-history-state']) setState($(k), '');
      $('user-feed-state').textContent = 'not connected';
      $('user-feed-state').className = 'badge';
      if (!id) { setState($('user-state'), 'enter a user id'); return; }
      if (needCredential($('user-state'))) return;
      this.id = id;
      this.day = day;
      this.status();
      keep(new Feed(Object.assign({ userIds: id }, isOperator() ? { view: 'operator' } : {}), $('user-feed-state'), {
        snapshot: (m) => { const s = m.statuses && m.statuses[0]; if (s) { this.showStatus(s.status); this.showCustom(s.data); } },
        change: (m) => {
          this.showStatus(m.status);
          this.showCustom(m.data);
          clearTimeout(this.soon);
          this.soon = setTimeout(() => this.status(), 300);
        },
      }));
      this.history();
      this.slider(params.get('at'));
    },
    showStatus(s) {
      $('user-status').textContent = s;
      $('user-status').className = 'status ' + s;
    },
    showCustom(d) {
      $('user-custom').textContent = custom(d);
    },
    async status() {
      try {
        const u = await api(`/v1/users/${enc(this.id)}/status` + opView('?'));
        this.showStatus(u.status);
        this.showCustom(u.data);
        $('user-lastseen').textContent = when(u.lastSeen);
        $('user-lastactive').textContent = when(u.lastActive);
        $('user-lastupdated').textContent = when(u.lastUpdated);
        const tb = $('user-devices');
        tb.textContent = '';
        for (const d of u.devices || []) {
          const tr = tb.insertRow();
          tr.insertCell().textContent = d.deviceId;
          const c = tr.insertCell();
          c.textContent = d.status;
          c.className = 'status ' + d.status;
          tr.insertCell().textContent = when(d.lastSeen);
        }
        if (!(u.devices || []).length) tb.insertRow().insertCell().textContent = 'no live device';
        setState($('user-state'), '');
      } catch (e) {
        setState($('user-state'), 'status unavailable: ' + e.message, true);
      }
    },
    async history() {
      const st = $('user-history-state');
      if (S.role !== 'operator') {
        setState(st, 'a user\u2019s sessions and timeline include time spent invisible: they need a key with the operator scope', true);
        return;
      }
      const from = this.day, to = addDays(this.day, 1), base = `/v1/users/${enc(this.id)}`;
      try {
        const [ss, tl] = await Promise.all([
          api(`${base}/sessions?from=${from}&to=${to}&view=operator`),
          api(`${base}/timeline?from=${from}&to=${to}&limit=1000&view=operator`),
        ]);
        setState(st, ss.sessions.length || tl.entries.length ? '' : 'nothing recorded on ' + from);
        const tb = $('user-sessions');
        tb.textContent = '';
        for (const s of ss.sessions.slice().reverse()) {
          const tr = tb.insertRow();
          tr.dataset.start = s.start;
          tr.insertCell().textContent = when(s.start);
          tr.insertCell().textContent = s.open ? 'open (' + s.status + ')' : when(s.end);
          tr.insertCell().textContent = fmtDur(s.onlineSeconds);
          tr.insertCell().textContent = fmtDur(s.idleSeconds);
          tr.insertCell().textContent = fmtDur(s.invisibleSeconds);
        }
        const tt = $('user-timeline');
        tt.textContent = '';
        for (const e of tl.entries) {
          const tr = tt.insertRow();
          // data: absent when the event left the custom status as it was, {} for a clear.
          const data = !e.data ? '' : (e.data.text || e.data.emoji) ? custom(e.data) : 'cleared';
          for (const v of [when(e.occurredAt), e.entryType, e.kind || '', e.status ? (e.previousStatus ? e.previousStatus + ' \u2192 ' : '') + e.status : '', e.deviceId || '', e.source || e.cause || '', data]) {
            tr.insertCell().textContent = v;
          }
        }
        $('user-timeline-n').textContent = tl.entries.length + (tl.nextCursor ? '+' : '');
        this.bar(tl.entries, ss.sessions);
      } catch (e) {
        setState(st, historyProblem(e), true);
      }
    },
    // bar draws the day's statuses from the timeline's changes, sessions beneath.
    bar(entries, sessions) {
      const box = $('user-bar');
      box.textContent = '';
      const x0 = dayStart(this.day).getTime(), x1 = x0 + 86400e3, end = Math.min(x1, Date.now());
      const W = Math.max(box.clientWidth, 300), H = 70, L = 10, R = 10;
      const x = (t) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
      const svg = el('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', class: 'short' });
      const changes = entries.filter((e) => e.entryType === 'change').reverse();
      let status = changes.length ? changes[0].previousStatus || 'offline' : 'offline', t = x0;
      const seg = (a, b, s) => { if (b > a) svg.append(el('rect', { class: 'seg-' + s, x: x(a), y: 6, width: x(b) - x(a), height: 22 })); };
      for (const c of changes) {
        const at = Date.parse(c.occurredAt);
        seg(t, at, status);
        status = c.status;
        t = at;
      }
      seg(t, end, status);
      for (const s of sessions) {
        const a = Date.parse(s.start), b = s.end ? Date.parse(s.end) : end;
        svg.append(el('rect', { class: 'bar', x: x(Math.max(a, x0)), y: 34, width: Math.max(2, x(Math.min(b, x1)) - x(Math.max(a, x0))), height: 6 }));
      }
      for (let h = 0; h <= 24; h += 3) svg.append(el('text', { x: x(x0 + h * 3600e3), y: 60, 'text-anchor': 'middle' }, pad(h % 24) + ':00'));
      box.append(svg);
    },
    slider(at) {
      const sl = $('pit-slider');
      const x0 = dayStart(this.day).getTime();
      const maxSec = Math.max(0, Math.min(86399, Math.floor((Date.now() - x0) / 1000) - 1));
      sl.max = String(maxSec);
      // By default a quarter of an hour ago: history makes an instant final about ten
      // minutes after it.
      let v = Math.max(0, maxSec - 900);
      if (at) { const t = Date.parse(at); if (!isNaN(t)) v = Math.max(0, Math.min(maxSec, Math.floor((t - x0) / 1000))); }
      sl.value = String(v);
      const ask = () => {
        const t = new Date(x0 + Number(sl.value) * 1000);
        $('pit-at').textContent = this.day + ' ' + hhmmss(t) + ' UTC';
        clearTimeout(this.pitTimer);
        this.pitTimer = setTimeout(() => this.pointInTime(t), 200);
      };
      sl.oninput = ask;
      ask();
    },
    async pointInTime(t) {
      const seq = (this.pitSeq = (this.pitSeq || 0) + 1);
      $('pit-status').textContent = '…';
      $('pit-status').className = 'status';
      try {
        const r = await api(`/v1/users/${enc(this.id)}/status?at=${enc(t.toISOString())}` + opView('&'));
        if (seq !== this.pitSeq) return;
        $('pit-status').textContent = r.status;
        $('pit-status').className = 'status ' + r.status;
        $('pit-status').dataset.at = r.at;
        setState($('pit-state'), '');
      } catch (e) {
        if (seq !== this.pitSeq) return;
        $('pit-status').textContent = '—';
        setState($('pit-state'), e.status === 404 ? 'history holds no state of that instant' : unavailable(e) ? 'history unavailable: ' + e.message : e.message, true);
      }
    },
  };

  // History: concurrency over a day with its peak, unique users and a user's online
  // time over a range, each downloadable as CSV.
  const history = {
    enter(arg, params) {
      if (!$('conc-day').value) $('conc-day').value = params.get('day') || todayUTC();
      if (!$('days-to').value) $('days-to').value = todayUTC();
      if (!$('days-from').value) $('days-from').value = addDays(todayUTC(), -6);
      if (needCredential($('conc-state'))) return;
      if (S.role === 'user') { setState($('conc-state'), 'history needs an API key', true); return; }
      this.concurrency();
      this.days();
    },
    async concurrency() {
      const day = $('conc-day').value || todayUTC(), st = $('conc-state');
      $('conc-csv').hidden = true;
      $('conc-peak').textContent = '';
      try {
        const r = await api(`/v1/stats/concurrency?from=${day}&to=${addDays(day, 1)}&step=minute${opView('&')}`);
        setState(st, r.points.length ? '' : 'no rows for ' + day);
        let peak = null;
        const pts = r.points.map((p) => {
          const t = Date.parse(p.at);
          if (!peak || p.peakOnline > peak.v) peak = { t, v: p.peakOnline };
          return [t, p.peakOnline];
        });
        if (peak) {
          peak.label = 'peak ' + fmtN(peak.v) + ' at ' + hhmm(new Date(peak.t));
          $('conc-peak').textContent = peak.label + ' UTC';
        }
        const x0 = dayStart(day).getTime();
        lineChart($('conc-chart'), { x0, x1: x0 + 86400e3, series: [{ points: pts, area: true }], peak });
        // closeInvisible is in the operator view only: readers' CSV has no such column.
        const invisible = isOperator();
        csvLink($('conc-csv'), `concurrency-${day}.csv`,
          ['minute', 'peak_online', 'close_online', 'close_idle'].concat(invisible ? ['close_invisible'] : []),
          r.points.map((p) => [p.at, p.peakOnline, p.closeOnline, p.closeIdle].concat(invisible ? [p.closeInvisible] : [])));
      } catch (e) {
        $('conc-chart').textContent = '';
        setState(st, historyProblem(e), true);
      }
    },
    async days() {
      const from = $('days-from').value, to = $('days-to').value, who = $('days-user').value.trim();
      $('uniq-csv').hidden = $('daily-csv').hidden = true;
      try {
        const r = await api(`/v1/stats/uniques?from=${from}&to=${addDays(to, 1)}&period=day`);
        const items = r.points.map((p) => ({ label: p.start.slice(0, 10), value: p.users }));
        setState($('uniq-state'), items.length ? 'unique users per day' : 'no unique users recorded from ' + from + ' to ' + to);
        barChart($('uniq-chart'), items, (v) => fmtN(Math.round(v)));
        csvLink($('uniq-csv'), `unique-users-${from}-${to}.csv`, ['day', 'users'], items.map((i) => [i.label, i.value]));
      } catch (e) {
        $('uniq-chart').textContent = '';
        setState($('uniq-state'), historyProblem(e), true);
      }
      $('daily-chart').textContent = '';
      if (!who) { setState($('daily-state'), 'enter a user to see their online time per day'); return; }
      try {
        const r = await api(`/v1/users/${enc(who)}/daily?from=${from}&to=${to}&view=operator`);
        const days = r.days.slice().sort((a, b) => (a.day < b.day ? -1 : 1));
        setState($('daily-state'), days.length ? `${who}: hours online per day` : `${who} was not seen from ${from} to ${to}`);
        barChart($('daily-chart'), days.map((d) => ({ label: d.day, value: d.onlineSeconds / 3600 })), (v) => v.toFixed(1) + ' h');
        csvLink($('daily-csv'), `online-time-${who}-${from}-${to}.csv`, ['day', 'online_seconds', 'idle_seconds', 'invisible_seconds', 'sessions'],
          days.map((d) => [d.day, d.onlineSeconds, d.idleSeconds, d.invisibleSeconds, d.sessions]));
      } catch (e) {
        setState($('daily-state'), historyProblem(e), true);
      }
    },
  };

  // Pipeline: the services' metrics, as GET /v1/dashboard/pipeline reads them.
  const pipeline = {
    prev: {},
    enter() {
      if (needCredential($('pipe-state'))) return;
      if (!isOperator()) { setState($('pipe-state'), 'the pipeline view needs a key with the operator scope', true); return; }
      this.load();
      every(5000, () => this.load());
    },
    // quantile of the observations between two cumulative reads of a histogram.
    quantile(f, before, q) {
      const buckets = f.buckets.map(([le, c], i) => [le, c - (before ? before.buckets[i][1] : 0)]);
      const n = f.count - (before ? before.count : 0);
      if (n <= 0) return null;
      for (const [le, c] of buckets) if (c >= q * n) return le;
      return Infinity;
    },
    async load() {
      let h;
      try {
        h = await api('/v1/dashboard/pipeline');
        setState($('pipe-state'), 'read at ' + hhmmss(new Date(h.at)) + ' UTC');
      } catch (e) {
        setState($('pipe-state'), 'pipeline view unavailable: ' + e.message, true);
        return;
      }
      const rb = $('pipe-rebuild');
      rb.textContent = h.state.ok ? 'whole' : h.state.rebuilding ? 'rebuilding' : 'unknown';
      rb.className = 'badge ' + (h.state.ok ? 'live' : 'bad');
      rb.title = h.state.message || '';
      const tb = $('pipe-services');
      tb.textContent = '';
      for (const s of h.services) {
        const tr = tb.insertRow();
        tr.dataset.service = s.name;
        tr.insertCell().textContent = s.name;
        const up = tr.insertCell();
        up.textContent = s.up ? 'up' : 'down: ' + s.error;
        if (!s.up) up.className = 'bad';
        tr.insertCell().textContent = s.lag ? Object.entries(s.lag).map(([t, n]) => `${t}: ${fmtN(n)}`).join(', ') : '—';
        const fr = [];
        for (const f of s.freshness || []) {
          const key = s.name + ' ' + f.metric + ' ' + JSON.stringify(f.labels || {});
          const before = this.prev[key];
          const recent = before && f.count > before.count;
          const n = recent ? f.count - before.count : f.count;
          if (!n) continue;
          const p99 = this.quantile(f, recent ? before : null, 0.99);
          const mean = (f.sumSeconds - (recent ? before.sumSeconds : 0)) / n;
          const name = f.metric.replace(/^pulse_/, '').replace(/_seconds$/, '') + (f.labels && f.labels.topic ? ' (' + f.labels.topic + ')' : '');
          fr.push(`${name}: ${p99 === Infinity ? 'over the largest bucket' : '\u2264 ' + fmtDur(p99)} / ${fmtDur(mean)}${recent ? '' : ' since start'}`);
          this.prev[key] = f;
        }
        tr.insertCell().textContent = fr.join('; ') || '—';
        const dl = tr.insertCell();
        dl.textContent = s.deadLetters == null ? '—' : fmtN(s.deadLetters);
        if (s.deadLetters > 0) dl.className = 'bad';
        tr.insertCell().textContent = s.rebuilds == null ? '—' : fmtN(s.rebuilds);
        const deps = tr.insertCell();
        deps.textContent = s.dependencies ? Object.entries(s.dependencies).map(([d, ok]) => d + (ok ? ' \u2713' : ' \u2717')).join('  ') : '—';
        if (s.dependencies && Object.values(s.dependencies).includes(false)) deps.className = 'bad';
      }
      this.endpoints(h.services);
    },
    // endpoints shows the notifier's webhook endpoints, as the query service judged them
    // (state ok, behind or failing, with its reason) over their recent span.
    endpoints(services) {
      const notifiers = services.filter((s) => s.endpoints || s.endpointsConfigured != null);
      $('pipe-webhooks').hidden = !notifiers.length;
      const tb = $('pipe-endpoints');
      tb.textContent = '';
      const span = (r) => (r.windowSeconds == null ? 'since start' : 'last ' + fmtDur(r.windowSeconds));
      for (const s of notifiers) {
        const eps = s.endpoints || [];
        if (!eps.length) {
          const td = tb.insertRow().insertCell();
          td.colSpan = 8;
          td.textContent = `${s.name}: ${fmtN(s.endpointsConfigured)} endpoints configured, none has had a change yet`;
          continue;
        }
        for (const e of eps) {
          const r = e.recent || {};
          const tr = tb.insertRow();
          tr.dataset.endpoint = e.id;
          tr.dataset.state = e.state;
          tr.insertCell().textContent = notifiers.length > 1 ? s.name + ' ' + e.id : e.id;
          const st = tr.insertCell();
          const badge = document.createElement('span');
          badge.className = 'badge ' + (e.state === 'ok' ? 'live' : e.state === 'behind' ? 'warn' : 'bad');
          badge.textContent = e.state;
          st.append(badge);
          if (e.reason) {
            const why = document.createElement('span');
            why.className = 'hint';
            why.textContent = e.reason;
            st.append(why);
          }
          tr.insertCell().textContent = fmtN(e.delivered);
          const dead = tr.insertCell();
          dead.textContent = fmtN(e.dead);
          if (r.dead > 0) dead.className = 'bad';
          tr.insertCell().textContent = fmtN(e.backlog);
          const oldest = tr.insertCell();
          oldest.textContent = fmtDur(e.oldestPendingSeconds);
          if (e.state === 'behind') oldest.className = 'bad';
          tr.insertCell().textContent = r.latencyP99Seconds == null ? '\u2014'
            : `${r.latencyP99AboveBuckets ? '> ' : '\u2264 '}${fmtDur(r.latencyP99Seconds)} / ${fmtDur(r.latencyMeanSeconds)} (${span(r)})`;
          const failed = tr.insertCell();
          failed.textContent = `${fmtN(r.attemptsFailed)} of ${fmtN(r.attemptsFailed + r.attemptsDelivered)} (${span(r)})`;
          if (r.attemptsFailed > r.attemptsDelivered) failed.className = 'bad';
        }
      }
    },
  };

  const views = { now, user, history, pipeline };

  // ---- routing: #now?group=, #user/<id>?day=&at=, #history?day=, #pipeline --------------

  function route() {
    const h = location.hash.replace(/^#/, '');
    const [pathPart, query] = h.split('?');
    const [name, ...rest] = pathPart.split('/');
    const view = views[name] ? name : 'now';
    leave();
    for (const k in views) $('view-' + k).hidden = k !== view;
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === view);
    views[view].enter(decodeURIComponent(rest.join('/')), new URLSearchParams(query || ''));
  }

  // ---- the credential --------------------------------------------------------------------

  async function identify() {
    const who = $('who');
    S.role = null;
    S.sub = '';
    if (!S.cred) {
      // A service run with PULSE_AUTH=off reads without credentials.
      try { await api('/v1/online/count'); S.role = 'reader'; who.textContent = 'no credential (auth off)'; } catch (e) { who.textContent = 'no credential'; }
      return;
    }
    const parts = S.cred.split('.');
    if (parts.length === 3) {
      try {
        const claims = JSON.parse(atob(parts[1].replace(/-/g, '+').replace(/_/g, '/')));
        S.sub = claims.sub || '';
      } catch (e) { /* shown as a token without subject */ }
      S.role = 'user';
      who.textContent = 'user token: ' + (S.sub || '?');
      return;
    }
    try {
      await api('/v1/online/count?view=operator');
      S.role = 'operator';
    } catch (e) {
      // The operator view is checked before the counts are read: anything but 401
      // and 403 means the key has the operator scope.
      if (e.status === 403) S.role = 'reader';
      else if (e.status === 401) { who.textContent = 'key refused'; return; } else if (e.status === 0) { who.textContent = 'query unreachable'; return; } else S.role = 'operator';
    }
    who.textContent = S.role + ' key';
  }

  async function useCredential(cred) {
    S.cred = cred;
    if (cred) sessionStorage.setItem(STORE, cred); else sessionStorage.removeItem(STORE);
    await identify();
    $('cred-help').hidden = !!S.role;
    route();
  }

  $('cred-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = $('cred').value.trim();
    $('cred').value = '';
    useCredential(v);
  });
  $('cred-forget').addEventListener('click', () => useCredential(''));
  $('user-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('user-id').value.trim();
    location.hash = '#user/' + enc(id) + '?day=' + ($('user-day').value || todayUTC());
  });
  $('group-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const g = $('group-id').value.trim();
    location.hash = '#now' + (g ? '?group=' + enc(g) : '');
  });
  $('group-all').addEventListener('click', () => { location.hash = '#now'; });
  $('conc-form').addEventListener('submit', (ev) => { ev.preventDefault(); history.concurrency(); });
  $('days-form').addEventListener('submit', (ev) => { ev.preventDefault(); history.days(); });
  window.addEventListener('hashchange', route);
  useCredential(S.cred);
})();
