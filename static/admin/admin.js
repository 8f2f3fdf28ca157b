// admin.js drives the flashgate dashboard: it asks for the admin token once
// (kept in sessionStorage), polls the admin API every second, and draws the
// request and order rates on two canvases by hand.
(function () {
  'use strict';

  var TOKEN_KEY = 'flashgate.adminToken';
  var POINTS = 60;
  var $ = function (id) { return document.getElementById(id); };

  var timer = null;
  var last = null; // {t, requests, orders} of the previous poll
  var seriesRequests = [];
  var seriesOrders = [];

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

  function api(method, path, body) {
    var opts = { method: method, headers: { 'Authorization': 'Bearer ' + token() } };
    if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    return fetch(path, opts).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (data) {
        if (res.status === 401) {
          signOut('That token was refused.');
          throw new Error('unauthorized');
        }
        if (!res.ok) {
          var e = new Error(data.error || ('HTTP ' + res.status));
          e.field = data.field;
          throw e;
        }
        return data;
      });
    });
  }

  function showApp(on) {
    $('login').hidden = on;
    $('app').hidden = !on;
    $('signout').hidden = !on;
    $('live').hidden = !on;
  }

  function signOut(msg) {
    sessionStorage.removeItem(TOKEN_KEY);
    if (timer) { clearInterval(timer); timer = null; }
    last = null; seriesRequests = []; seriesOrders = [];
    showApp(false);
    $('login-error').hidden = !msg;
    $('login-error').textContent = msg || '';
    $('token').value = '';
    $('token').focus();
  }

  function signIn() {
    showApp(true);
    poll();
    timer = setInterval(poll, 1000);
  }

  function fmt(n) { return (n || 0).toLocaleString('en-US'); }

  function cell(tr, text, cls) {
    var td = document.createElement('td');
    if (cls) td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function button(label, cls, act, id) {
    var b = document.createElement('button');
    b.className = 'small ' + cls;
    b.textContent = label;
    b.dataset.act = act;
    b.dataset.id = id;
    return b;
  }

  function render(statuses) {
    var tbody = document.querySelector('#sales tbody');
    tbody.textContent = '';
    $('empty').hidden = statuses.length > 0;
    statuses.forEach(function (s) {
      var tr = document.createElement('tr');
      tr.dataset.sale = s.id;
      var first = cell(tr, '');
      var strong = document.createElement('strong');
      strong.textContent = s.id;
      var name = document.createElement('div');
      name.className = 'name';
      name.textContent = s.name || '';
      first.appendChild(strong);
      first.appendChild(name);
      if (s.queue) {
        // A fair queue: entrants, the admitted position, the admission rate
        // and the last entrant's estimated wait.
        var q = s.queue, qd = document.createElement('div');
        qd.className = 'name c-queue';
        qd.textContent = 'Fair queue: ' + fmt(q.entrants) + ' entrants · admitted ' + fmt(q.admitted_position) +
          ' · ' + fmt(q.rate_per_minute) + '/min · wait ' +
          (q.eta_seconds == null ? '—' : Math.ceil(q.eta_seconds / 60) + ' min') +
          (q.open ? '' : ' · not open yet');
        first.appendChild(qd);
      }
      if (s.variants) {
        // A sale sold in variants: what each has left of its total.
        var vd = document.createElement('div');
        vd.className = 'name c-variants';
        vd.textContent = 'Variants: ' + s.variants.map(function (v) {
          return v.id + ' ' + fmt(v.remaining) + '/' + fmt(v.total) + ' left';
        }).join(' · ');
        first.appendChild(vd);
      }
      var st = cell(tr, '');
      var badge = document.createElement('span');
      badge.className = 'state ' + s.state;
      badge.textContent = s.state.replace('_', ' ');
      st.appendChild(badge);
      cell(tr, fmt(s.total), 'n c-total');
      var booked = cell(tr, fmt(s.booked), 'n c-booked');
      var bar = document.createElement('div');
      bar.className = 'bar';
      var fill = document.createElement('i');
      fill.style.width = (s.total ? Math.min(100, 100 * s.booked / s.total) : 0) + '%';
      bar.appendChild(fill);
      booked.appendChild(bar);
      cell(tr, fmt(s.remaining), 'n c-remaining');
      cell(tr, fmt(s.admitted), 'n c-admitted');
      cell(tr, fmt(s.rejected), 'n c-rejected');
      var o = s.orders || {};
      cell(tr, fmt(o.pending_payment), 'n c-pending');
      cell(tr, fmt(o.paid), 'n c-paid');
      cell(tr, fmt(o.cancelled), 'n c-cancelled');
      cell(tr, fmt(o.expired), 'n c-expired');
      cell(tr, fmt(o.refunded), 'n c-refunded');
      cell(tr, fmt(s.stream_backlog), 'n c-backlog');
      var acts = cell(tr, '', 'n');
      if (s.state === 'open' || s.state === 'sold_out') {
        acts.appendChild(button('Stop', 'stop', 'stop', s.id));
      } else {
        acts.appendChild(button('Start', 'start', 'start', s.id));
      }
      acts.appendChild(button('Re-sync', 'resync', 'resync', s.id));
      tbody.appendChild(tr);
    });
  }

  function record(statuses) {
    var now = performance.now();
    var req = 0, ord = 0;
    statuses.forEach(function (s) { req += (s.admitted || 0) + (s.rejected || 0); ord += s.reserved || 0; });
    if (last) {
      var dt = Math.max((now - last.t) / 1000, 0.001);
      push(seriesRequests, Math.max(0, (req - last.requests) / dt));
      push(seriesOrders, Math.max(0, (ord - last.orders) / dt));
    }
    last = { t: now, requests: req, orders: ord };
    $('rps-now').textContent = fmt(Math.round(seriesRequests[seriesRequests.length - 1] || 0));
    $('ops-now').textContent = fmt(Math.round(seriesOrders[seriesOrders.length - 1] || 0));
    draw($('chart-requests'), seriesRequests, '#2f6fe8');
    draw($('chart-orders'), seriesOrders, '#e8472f');
  }

  function push(series, v) {
    series.push(v);
    if (series.length > POINTS) series.shift();
  }

  // draw plots series on canvas: a grid, a filled line and the axis maximum.
  function draw(canvas, series, color) {
    var ratio = window.devicePixelRatio || 1;
    var w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(w * ratio)) { canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio); }
    var ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    var padL = 44, padB = 18, padT = 8, padR = 8;
    var pw = w - padL - padR, ph = h - padT - padB;
    var top = 1;
    series.forEach(function (v) { if (v > top) top = v; });
    top = niceCeil(top);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#8a92a3';
    ctx.strokeStyle = '#e9ecf1';
    ctx.lineWidth = 1;
    for (var g = 0; g <= 4; g++) {
      var y = padT + ph - (ph * g / 4);
      ctx.beginPath(); ctx.moveTo(padL, Math.round(y) + 0.5); ctx.lineTo(w - padR, Math.round(y) + 0.5); ctx.stroke();
      ctx.textAlign = 'right';
      ctx.fillText(short(top * g / 4), padL - 6, y + 4);
    }
    ctx.textAlign = 'left';
    ctx.fillText('-' + POINTS + 's', padL, h - 4);
    ctx.textAlign = 'right';
    ctx.fillText('now', w - padR, h - 4);
    if (series.length < 2) return;
    var step = pw / (POINTS - 1);
    var x0 = padL + pw - step * (series.length - 1);
    ctx.beginPath();
    series.forEach(function (v, i) {
      var x = x0 + i * step, y = padT + ph - ph * v / top;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.stroke();
    ctx.lineTo(x0 + (series.length - 1) * step, padT + ph);
    ctx.lineTo(x0, padT + ph);
    ctx.closePath();
    ctx.globalAlpha = 0.12;
    ctx.fillStyle = color;
    ctx.fill();
    ctx.globalAlpha = 1;
  }

  function niceCeil(v) {
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  function short(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1).replace('.0', '') + 'M';
    if (v >= 1e3) return (v / 1e3).toFixed(1).replace('.0', '') + 'k';
    return String(Math.round(v * 10) / 10);
  }

  // renderAudit fills the recent-actions table from GET /admin/audit.
  function renderAudit(entries) {
    var tbody = document.querySelector('#audit tbody');
    tbody.textContent = '';
    entries.slice(0, 50).forEach(function (a) {
      var tr = document.createElement('tr');
      cell(tr, new Date(a.time).toLocaleTimeString());
      cell(tr, a.action);
      cell(tr, a.sale || '');
      cell(tr, a.order || '');
      cell(tr, a.remote);
      cell(tr, a.result, a.result === 'ok' ? '' : 'error');
      tbody.appendChild(tr);
    });
    $('audit-empty').hidden = entries.length > 0;
  }

  function poll() {
    if (!token()) return;
    api('GET', '/admin/audit').then(renderAudit).catch(function () {});
    api('GET', '/admin/sales').then(function (sales) {
      return Promise.all(sales.map(function (s) {
        return api('GET', '/admin/sales/' + encodeURIComponent(s.id));
      }));
    }).then(function (statuses) {
      statuses.sort(function (a, b) { return a.id < b.id ? -1 : 1; });
      render(statuses);
      record(statuses);
      $('live').classList.remove('stale');
      $('live-text').textContent = 'live';
      $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    }).catch(function (e) {
      if (e.message === 'unauthorized') return;
      $('live').classList.add('stale');
      $('live-text').textContent = 'reconnecting';
    });
  }

  function localToRFC3339(v) {
    if (!v) return null;
    var d = new Date(v);
    return isNaN(d) ? null : d.toISOString();
  }

  $('login-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var t = $('token').value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $('login-error').hidden = true;
    signIn();
  });

  $('signout').addEventListener('click', function () { signOut(''); });

  document.querySelector('#sales tbody').addEventListener('click', function (ev) {
    var b = ev.target.closest('button[data-act]');
    if (!b) return;
    b.disabled = true;
    $('action-error').hidden = true;
    api('POST', '/admin/sales/' + encodeURIComponent(b.dataset.id) + '/' + b.dataset.act).then(poll).catch(function (e) {
      $('action-error').hidden = false;
      $('action-error').textContent = b.dataset.act + ' ' + b.dataset.id + ': ' + e.message;
      b.disabled = false;
    });
  });

  $('create-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var f = ev.target;
    var num = function (name) { var v = f.elements[name].value; return v === '' ? 0 : Number(v); };
    var body = {
      id: f.elements.id.value.trim(),
      name: f.elements.name.value.trim(),
      price_cents: num('price_cents'),
      total: num('total'),
      admit_ratio: num('admit_ratio'),
      per_user: num('per_user'),
      buckets: num('buckets'),
      starts_at: localToRFC3339(f.elements.starts_at.value),
      ends_at: localToRFC3339(f.elements.ends_at.value)
    };
    var msg = $('create-msg');
    msg.className = '';
    msg.textContent = 'creating…';
    api('POST', '/admin/sales', body).then(function (s) {
      msg.className = 'okmsg';
      msg.textContent = 'created ' + s.id;
      f.reset();
      poll();
    }).catch(function (e) {
      msg.className = 'error';
      msg.textContent = e.field ? (e.message + ': ' + e.field) : e.message;
    });
  });

  if (token()) signIn(); else showApp(false);
})();
