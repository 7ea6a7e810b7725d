// servelab trace page: draws each run of the embedded data as plain SVG (no library, nothing
// loaded from the network). Written by servelab.trace.page; the data's shape is documented there.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var KINDS = ["waiting", "prefill", "recompute", "decode"];
  var COLOR = {waiting: "#c9c9c9", prefill: "#4c78a8", recompute: "#f58518", decode: "#54a24b",
               shared: "#7b4fa0", cached: "#f2d98c", free: "#dddddd", used: "#4c78a8",
               host: "#9c755f", miss: "#d62728", budget: "#333", waitq: "#e45756", runq: "#000000"};
  var W = 1080, LEFT = 64;
  var tip = document.getElementById("tip");

  function svg(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, attrs, parent, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function ms(x) { return (x === null || x !== x) ? "-" : (x * 1e3).toFixed(1) + " ms"; }
  function showTip(ev, lines) {
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    tip.style.left = (ev.pageX + 14) + "px";
    tip.style.top = (ev.pageY + 10) + "px";
  }
  function hideTip() { tip.style.display = "none"; }
  // an axis whose labels are all different: ticks at (x, label) pairs, drawn in a group of its own
  function axisTicks(parent, x0, x1, y, ticks) {
    var g = svg("g", {"class": "axis"}, parent);
    svg("line", {x1: x0, x2: x1, y1: y, y2: y, stroke: "#888"}, g);
    ticks.forEach(function (t, i) {
      svg("line", {x1: t[0], x2: t[0], y1: y, y2: y + 4, stroke: "#888"}, g);
      svg("text", {x: t[0], y: y + 15, "text-anchor": i === ticks.length - 1 && i ? "end" : i === 0 ? "start" : "middle",
                   "class": "tick axis-label"}, g).textContent = t[1];
    });
  }
  // a clock axis: six ticks, with as many decimals as it takes for no two labels to read the same
  function timeAxis(parent, x0, x1, y, hi) {
    var unit = hi < 1 ? 1e3 : 1, suffix = hi < 1 ? " ms" : " s";
    for (var digits = 0; digits <= 9; digits++) {
      var labels = [0, 1, 2, 3, 4, 5].map(function (i) { return (hi * i / 5 * unit).toFixed(digits) + suffix; });
      if (labels.every(function (l, i) { return i === 0 || l !== labels[i - 1]; })) break;
    }
    axisTicks(parent, x0, x1, y, labels.map(function (l, i) { return [x0 + (x1 - x0) * i / 5, l]; }));
  }
  // a step axis: at most six steps, each a whole step that exists (0 .. n-1), under its bar
  function stepAxis(parent, x0, x1, y, n, sx) {
    var seen = {}, ticks = [];
    for (var i = 0; i <= 5 && n > 0; i++) {
      var step = Math.round((n - 1) * i / 5);
      if (!seen[step]) { seen[step] = true; ticks.push([sx(step + 0.5), "step " + step]); }
    }
    axisTicks(parent, x0, x1, y, ticks);
  }
  // a legend names every colour its chart draws with (tests/test_trace_browser.py checks it)
  function legend(parent, items, chart) {
    var d = html("div", {"class": "legend", "data-chart": chart}, parent);
    items.forEach(function (it) {
      var s = html("span", {}, d);
      html("i", {style: "background:" + it[1]}, s);
      s.appendChild(document.createTextNode(it[0]));
    });
  }

  function Run(run, root, index, diffStep) {
    var self = this;
    this.run = run;
    this.steps = run.steps;
    this.cur = 0;
    var cfg = run.config, n = this.steps.length;
    var box = html("section", {"class": "run", id: "run-" + index}, root);
    html("h2", {}, box, run.title);
    var misses = run.requests.filter(function (r) { return r.miss; }).length;
    var preempt = this.steps.reduce(function (a, s) { return a + s[5].length; }, 0);
    html("p", {"class": "summary"}, box,
         run.requests.length + " requests, " + n + " steps, " + preempt + " preemptions, " +
         misses + " SLO misses (TTFT <= " + ms(run.slo[0]) + ", TPOT <= " + ms(run.slo[1]) +
         "); token budget " + cfg.token_budget + ", max_num_seqs " + cfg.max_num_seqs + ", " +
         cfg.num_blocks + " KV blocks of " + cfg.block_size + " tokens" +
         (cfg.host_blocks ? ", host tier " + cfg.host_blocks + " blocks" : "") +
         (cfg.model ? "; priced as " + cfg.model + " on " + cfg.gpu : "") + ".");

    // ---- controls
    var ctl = html("div", {"class": "controls"}, box);
    var prev = html("button", {type: "button", "class": "prev"}, ctl, "\u25c0 step");
    var slider = html("input", {type: "range", min: 0, max: Math.max(n - 1, 0), value: 0,
                                "class": "scrub"}, ctl);
    var next = html("button", {type: "button", "class": "next"}, ctl, "step \u25b6");
    var play = html("button", {type: "button", "class": "play"}, ctl, "play");
    var label = html("span", {"class": "where"}, ctl);
    prev.onclick = function () { self.go(self.cur - 1); };
    next.onclick = function () { self.go(self.cur + 1); };
    slider.oninput = function () { self.go(+slider.value); };
    var timer = null;
    play.onclick = function () {
      if (timer) { clearInterval(timer); timer = null; play.textContent = "play"; return; }
      play.textContent = "pause";
      timer = setInterval(function () {
        if (self.cur >= n - 1) { clearInterval(timer); timer = null; play.textContent = "play"; }
        else self.go(self.cur + 1);
      }, 80);
    };
    this.slider = slider; this.label = label;

    var tEnd = n ? this.steps[n - 1][1] + this.steps[n - 1][2] : 1;
    run.requests.forEach(function (r) { tEnd = Math.max(tEnd, r.arrival); });
    tEnd = tEnd || 1;
    var tx = function (t) { return LEFT + (W - LEFT - 10) * t / tEnd; };
    var sx = function (i) { return LEFT + (W - LEFT - 10) * i / Math.max(n, 1); };
    this.tx = tx; this.sx = sx;

    // ---- timeline of requests
    html("h3", {}, box, "Requests over the simulated clock");
    legend(box, [["waiting", COLOR.waiting], ["prefill chunk", COLOR.prefill],
                 ["recompute after preemption", COLOR.recompute], ["decode", COLOR.decode],
                 ["preempted", COLOR.miss], ["SLO missed", COLOR.miss]], "timeline");
    var nr = run.requests.length;
    var rh = Math.max(3, Math.min(14, Math.floor(560 / Math.max(nr, 1))));
    var th = nr * rh + 30;
    var tl = svg("svg", {width: W, height: th, "class": "timeline"}, box);
    run.requests.forEach(function (r, row) {
      var g = svg("g", {"class": "req" + (r.miss ? " miss" : ""), "data-req": r.id}, tl);
      var y = row * rh;
      svg("rect", {x: 0, y: y, width: W, height: rh, fill: row % 2 ? "#fafafa" : "#fff"}, g);
      if (rh >= 9) svg("text", {x: LEFT - 16, y: y + rh - 2, "text-anchor": "end", "class": "tick"},
                       g).textContent = r.id;
      if (r.miss) svg("rect", {x: LEFT - 12, y: y + 1, width: 8, height: rh - 2,
                               fill: COLOR.miss, "class": "slo-miss"}, g);
      (run.segments[r.id] || []).forEach(function (sg) {
        var kind = KINDS[sg[0]];
        svg("rect", {x: tx(sg[1]), y: y + 1, width: Math.max(tx(sg[2]) - tx(sg[1]), 0.6),
                     height: rh - 2, fill: COLOR[kind], "class": "seg " + kind}, g);
      });
      r.preempted_at.forEach(function (t) {
        svg("line", {x1: tx(t), x2: tx(t), y1: y, y2: y + rh, stroke: COLOR.miss,
                     "stroke-width": 2, "class": "preempt"}, g);
      });
      if (r.finish !== null && r.finish <= tEnd)
        svg("line", {x1: tx(r.finish), x2: tx(r.finish), y1: y, y2: y + rh, stroke: "#000"}, g);
      g.onmousemove = function (ev) { showTip(ev, self.requestLines(r)); };
      g.onmouseleave = hideTip;
      g.onclick = function (ev) {
        var rect = tl.getBoundingClientRect();
        self.goTime((ev.clientX - rect.left - LEFT) / (W - LEFT - 10) * tEnd);
      };
    });
    timeAxis(tl, LEFT, W - 10, nr * rh + 2, tEnd);
    this.tcursor = svg("line", {y1: 0, y2: nr * rh, stroke: "#000", "stroke-dasharray": "3,2",
                                "class": "cursor"}, tl);

    // ---- each step's batch against the limits
    html("h3", {}, box, "Each step's batch: tokens against the token budget, seats against max_num_seqs");
    legend(box, [["prefill / recompute tokens", COLOR.prefill], ["decode tokens", COLOR.decode],
                 ["seats in use (right scale: max_num_seqs)", COLOR.runq]], "batches");
    var bh = 150;
    // the scales end at the limits, or lower when the run stays far below them (the limit is
    // then named above the chart): a budget of 8192 tokens would flatten decode-only steps
    var peakTok = 1, peakSeats = 1;
    this.steps.forEach(function (s) {
      peakTok = Math.max(peakTok, s[3].reduce(function (a, e) { return a + e[1]; }, 0));
      peakSeats = Math.max(peakSeats, s[3].length);
    });
    var topTok = peakTok * 1.25 < cfg.token_budget ? Math.ceil(peakTok * 1.25) : cfg.token_budget;
    var topSeats = peakSeats * 1.25 < cfg.max_num_seqs ? Math.ceil(peakSeats * 1.25) : cfg.max_num_seqs;
    if (topTok < cfg.token_budget || topSeats < cfg.max_num_seqs)
      html("p", {"class": "note"}, box, "(scales end at " + topTok + " tokens (left) and " + topSeats +
           " seats (right); the limits are " + cfg.token_budget + " tokens and " + cfg.max_num_seqs +
           " seats, drawn dashed where they fit)");
    var bc = svg("svg", {width: W, height: bh + 30, "class": "batches"}, box);
    var by = function (tok) { return bh - bh * tok / topTok; };
    var seatPts = [];
    this.steps.forEach(function (s, i) {
      var g = svg("g", {"class": "step" + (i === diffStep ? " differs" : ""), "data-step": s[0]}, bc);
      var pre = 0, dec = 0;
      s[3].forEach(function (e) { if (e[3] === 3) dec += e[1]; else pre += e[1]; });
      var w = Math.max(sx(i + 1) - sx(i) - (n < 200 ? 1 : 0), 0.5);
      svg("rect", {x: sx(i), y: by(pre), width: w, height: bh - by(pre), fill: COLOR.prefill}, g);
      svg("rect", {x: sx(i), y: by(pre + dec), width: w, height: bh - by(dec), fill: COLOR.decode}, g);
      svg("rect", {x: sx(i), y: 0, width: w, height: bh, fill: "transparent"}, g);
      if (i === diffStep) svg("rect", {x: sx(i) - 1, y: 0, width: w + 2, height: bh, fill: "none",
                                       stroke: COLOR.miss, "stroke-width": 2}, g);
      seatPts.push(sx(i + 0.5).toFixed(1) + "," + (bh - bh * s[3].length / topSeats).toFixed(1));
      g.onmousemove = function (ev) {
        showTip(ev, ["step " + s[0] + " at " + s[1].toFixed(4) + " s, " + ms(s[2]),
                     pre + " prefill + " + dec + " decode tokens of " + cfg.token_budget,
                     s[3].length + " seats of " + cfg.max_num_seqs]);
      };
      g.onmouseleave = hideTip;
      g.onclick = function () { self.go(i); };
    });
    svg("polyline", {points: seatPts.join(" "), fill: "none", stroke: "#000", "stroke-width": 1}, bc);
    if (topTok === cfg.token_budget)
      svg("line", {x1: LEFT, x2: W - 10, y1: 0.5, y2: 0.5, stroke: COLOR.budget, "stroke-dasharray": "4,3"}, bc);
    if (topSeats === cfg.max_num_seqs)
      svg("line", {x1: LEFT, x2: W - 10, y1: 1.5, y2: 1.5, stroke: "#000", "stroke-dasharray": "1,3"}, bc);
    svg("text", {x: LEFT - 4, y: 10, "text-anchor": "end", "class": "tick"}, bc).textContent = topTok + " tok";
    svg("text", {x: LEFT - 4, y: bh, "text-anchor": "end", "class": "tick"}, bc).textContent = "0";
    svg("text", {x: W - 12, y: 10, "text-anchor": "end", "class": "tick"}, bc).textContent = topSeats + " seats";
    stepAxis(bc, LEFT, W - 10, bh + 2, n, sx);
    this.bcursor = svg("line", {y1: 0, y2: bh, stroke: "#000", "stroke-dasharray": "3,2", "class": "cursor"}, bc);

    // ---- KV pool and queues over the steps
    html("h3", {}, box, "KV pool (blocks) and queues over the steps");
    legend(box, [["in use by one request", COLOR.used], ["shared prefix blocks", COLOR.shared],
                 ["free, prefix still cached", COLOR.cached], ["free", COLOR.free],
                 ["host tier", COLOR.host], ["waiting", COLOR.waitq], ["running", COLOR.runq]], "kv");
    var kh = 120;
    var kc = svg("svg", {width: W, height: 2 * kh + 40, "class": "kv"}, box);
    var ky = function (b) { return kh - kh * b / cfg.num_blocks; };
    var bands = [[], [], []];
    var maxQ = 1;
    this.steps.forEach(function (s) { maxQ = Math.max(maxQ, s[8].length, s[9]); });
    var wPts = [], rPts = [], hPts = [];
    this.steps.forEach(function (s, i) {
      var x0 = sx(i).toFixed(1), x1 = sx(i + 1).toFixed(1);
      var own = s[10] - s[13], shared = s[13], cached = s[12];
      var tops = [own, own + shared, own + shared + cached];
      tops.forEach(function (t, k) { bands[k].push(x0 + "," + ky(t).toFixed(1), x1 + "," + ky(t).toFixed(1)); });
      var qy = function (q) { return (2 * kh + 20 - kh * q / maxQ).toFixed(1); };
      wPts.push(x0 + "," + qy(s[8].length), x1 + "," + qy(s[8].length));
      rPts.push(x0 + "," + qy(s[9]), x1 + "," + qy(s[9]));
      if (cfg.host_blocks) hPts.push(x0 + "," + (kh - kh * s[14] / cfg.host_blocks).toFixed(1),
                                     x1 + "," + (kh - kh * s[14] / cfg.host_blocks).toFixed(1));
    });
    svg("rect", {x: LEFT, y: 0, width: W - LEFT - 10, height: kh, fill: COLOR.free}, kc);
    var base = [sx(n).toFixed(1) + "," + kh, LEFT + "," + kh];
    [[2, COLOR.cached], [1, COLOR.shared], [0, COLOR.used]].forEach(function (b) {
      if (bands[b[0]].length) svg("polygon", {points: bands[b[0]].concat(base).join(" "), fill: b[1]}, kc);
    });
    if (hPts.length) svg("polyline", {points: hPts.join(" "), fill: "none", stroke: COLOR.host, "stroke-width": 2}, kc);
    svg("text", {x: LEFT - 4, y: 10, "text-anchor": "end", "class": "tick"}, kc).textContent = cfg.num_blocks;
    svg("text", {x: LEFT - 4, y: kh, "text-anchor": "end", "class": "tick"}, kc).textContent = "0";
    if (wPts.length) {
      svg("polyline", {points: wPts.join(" "), fill: "none", stroke: COLOR.waitq, "stroke-width": 1.5}, kc);
      svg("polyline", {points: rPts.join(" "), fill: "none", stroke: COLOR.runq, "stroke-width": 1}, kc);
    }
    svg("text", {x: LEFT - 4, y: kh + 30, "text-anchor": "end", "class": "tick"}, kc).textContent = maxQ;
    svg("text", {x: LEFT - 4, y: 2 * kh + 20, "text-anchor": "end", "class": "tick"}, kc).textContent = "0 req";
    this.kcursor = svg("line", {y1: 0, y2: 2 * kh + 20, stroke: "#000", "stroke-dasharray": "3,2", "class": "cursor"}, kc);

    // ---- the step under the cursor
    html("h3", {}, box, "The step under the cursor");
    this.detail = html("div", {"class": "detail"}, box);
    legend(box, [["in use by one request (hover: which)", COLOR.used], ["shared prefix block", COLOR.shared],
                 ["free, prefix still cached", COLOR.cached], ["free", COLOR.free],
                 ["host tier, in use", COLOR.host]], "blocks");
    this.grid = svg("svg", {width: W, height: 10, "class": "blocks"}, box);

    // ---- requests table
    html("h3", {}, box, "Requests: TTFT and TPOT");
    var tbl = html("table", {"class": "requests"}, box);
    var head = html("tr", {}, tbl);
    var cols = ["id", "prompt", "output", "arrival", "TTFT", "TPOT", "preempted", "status", "SLO"];
    var texts = run.requests.some(function (r) { return r.text; });
    if (texts) cols.push("generated text");
    cols.forEach(function (c) { html("th", {}, head, c); });
    run.requests.forEach(function (r) {
      var tr = html("tr", {"class": r.miss ? "miss" : ""}, tbl);
      [r.id, r.prompt, r.out, r.arrival.toFixed(3) + " s", ms(r.ttft), ms(r.tpot), r.preemptions,
       r.status, r.status === "unservable" ? "-" : (r.miss ? "missed" : "met")].forEach(function (v) {
        html("td", {}, tr, String(v));
      });
      if (texts) html("td", {"class": "text"}, tr, JSON.stringify(r.text));
      tr.onmousemove = function (ev) { showTip(ev, self.requestLines(r)); };
      tr.onmouseleave = hideTip;
    });
    var asked = /step=(\d+)/.exec(window.location.hash);
    this.go(asked ? +asked[1] : (diffStep === null || diffStep === undefined ? 0 : diffStep));
  }

  Run.prototype.requestLines = function (r) {
    var lines = ["request " + r.id + " (" + r.status + ")",
                 "prompt " + r.prompt + " tokens, output " + r.out + " tokens",
                 "arrival " + r.arrival.toFixed(4) + " s, TTFT " + ms(r.ttft) + ", TPOT " + ms(r.tpot),
                 "preempted " + r.preemptions + " time(s)" + (r.miss ? ", SLO missed" : "")];
    if (r.prompt_text) lines.push("prompt: " + JSON.stringify(r.prompt_text.slice(0, 80)));
    if (r.text) lines.push("generated: " + JSON.stringify(r.text.slice(0, 80)));
    return lines;
  };

  Run.prototype.goTime = function (t) {
    var i = 0;
    while (i < this.steps.length - 1 && this.steps[i][1] + this.steps[i][2] < t) i++;
    this.go(i);
  };

  Run.prototype.go = function (i) {
    var n = this.steps.length;
    if (!n) { this.label.textContent = "no step"; return; }
    i = Math.max(0, Math.min(n - 1, i));
    this.cur = i;
    this.slider.value = i;
    var s = this.steps[i], cfg = this.run.config;
    this.label.textContent = "step " + s[0] + " of " + n + ", t = " + s[1].toFixed(4) + " s";
    var x = this.tx(s[1] + s[2] / 2), xs = this.sx(i + 0.5);
    [[this.tcursor, x], [this.bcursor, xs], [this.kcursor, xs]].forEach(function (c) {
      c[0].setAttribute("x1", c[1]); c[0].setAttribute("x2", c[1]);
    });
    var d = this.detail;
    d.textContent = "";
    var pre = 0, dec = 0;
    s[3].forEach(function (e) { if (e[3] === 3) dec += e[1]; else pre += e[1]; });
    html("p", {}, d, "step " + s[0] + ": starts at " + s[1].toFixed(4) + " s and takes " + ms(s[2]) +
         "; " + pre + " prefill + " + dec + " decode tokens of the budget " + cfg.token_budget +
         "; " + s[3].length + " seats of " + cfg.max_num_seqs + ".");
    var t = html("table", {"class": "batch"}, d);
    var h = html("tr", {}, t);
    ["request", "kind", "new tokens", "context"].forEach(function (c) { html("th", {}, h, c); });
    s[3].forEach(function (e) {
      var tr = html("tr", {"class": "entry " + KINDS[e[3]]}, t);
      [e[0], KINDS[e[3]], e[1], e[2]].forEach(function (v) { html("td", {}, tr, String(v)); });
    });
    var moves = [["admitted", s[4]], ["preempted", s[5]], ["finished", s[6]], ["running after the step", s[7]],
                 ["waiting after the step (front first)", s[8]]];
    moves.forEach(function (m) {
      html("p", {"class": "move"}, d, m[0] + ": " + (m[1].length ? m[1].join(", ") : "none"));
    });
    html("p", {}, d, "KV pool after the step: " + s[10] + " blocks in use (" + s[13] +
         " shared), " + s[11] + " free (" + s[12] + " of them still cached)" +
         (cfg.host_blocks ? ", host tier " + s[14] + " of " + cfg.host_blocks : "") + ".");
    this.drawBlocks(s);
  };

  Run.prototype.drawBlocks = function (s) {
    // one square a block, in the colours of the legend above it: each request's blocks together
    // (its shared ones first, in the shared colour; a thin gap before the next request's), then
    // the free ones still cached, then the empty ones; the host tier in a row of its own
    var g = this.grid, cfg = this.run.config, self = this;
    while (g.firstChild) g.removeChild(g.firstChild);
    var total = cfg.num_blocks, cell = total > 1024 ? 5 : total > 256 ? 8 : 14;
    var per = Math.floor((W - LEFT) / cell), k = 0;
    function sq(fill, last, title, req) {
      var r = svg("rect", {x: LEFT + (k % per) * cell, y: Math.floor(k / per) * cell,
                           width: cell - (last ? 3 : 1), height: cell - 1, fill: fill, "class": "block"}, g);
      if (req !== undefined) {
        r.onmousemove = function (ev) { showTip(ev, [title]); };
        r.onmouseleave = hideTip;
      }
      k++;
    }
    if (s[15] === null) {
      for (var i = 0; i < s[10]; i++) sq(COLOR.used);
    } else {
      s[15].forEach(function (e) {
        var title = "request " + e[0] + ": " + e[1] + " blocks, " + e[2] + " shared";
        for (var j = 0; j < e[1]; j++) sq(j < e[2] ? COLOR.shared : COLOR.used, j === e[1] - 1, title, e[0]);
      });
    }
    for (var c = 0; c < s[12]; c++) sq(COLOR.cached);
    while (k < Math.max(total, s[10] + s[11])) sq(COLOR.free);
    var rows = Math.ceil(k / per);
    if (cfg.host_blocks) {
      k = (rows + 1) * per;
      for (var hb = 0; hb < cfg.host_blocks; hb++) sq(hb < s[14] ? COLOR.host : COLOR.free);
      rows = Math.ceil(k / per);
    }
    g.setAttribute("height", rows * cell + 2);
    svg("text", {x: LEFT - 4, y: cell, "text-anchor": "end", "class": "tick"}, g).textContent = "GPU";
    if (cfg.host_blocks) svg("text", {x: LEFT - 4, y: (Math.ceil(total / per) + 1) * cell + cell,
                                      "text-anchor": "end", "class": "tick"}, g).textContent = "host";
  };

  function compare(data, root) {
    // the differing step of two runs, side by side, the entries that differ marked
    var box = html("section", {"class": "compare", id: "compare"}, root);
    var d = data.diff;
    html("h2", {}, box, "Step " + d.step + " differs");
    html("p", {}, box, d.message);
    var t = html("table", {"class": "sidebyside"}, box);
    var h = html("tr", {}, t);
    ["step", data.runs[0].title, data.runs[1].title].forEach(function (c) { html("th", {}, h, c); });
    d.rows.forEach(function (row) {
      var tr = html("tr", {"class": row[0] === d.step ? "differs" : ""}, t);
      html("td", {}, tr, String(row[0]));
      [row[1], row[2]].forEach(function (parts) {
        var td = html("td", {}, tr);
        parts.forEach(function (p, k) {
          html("span", {"class": p[1] ? "bad" : ""}, td, (k ? " " : "") + p[0]);
        });
      });
    });
  }

  var data = JSON.parse(document.getElementById("trace-data").textContent);
  var root = document.getElementById("runs");
  if (data.diff) compare(data, root);
  var views = data.runs.map(function (run, i) {
    return new Run(run, root, i, data.diff ? data.diff.step : null);
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "ArrowRight" && ev.key !== "ArrowLeft") return;
    views.forEach(function (v) { v.go(v.cur + (ev.key === "ArrowRight" ? 1 : -1)); });
  });
  document.body.setAttribute("data-rendered", String(views.length));
})();
