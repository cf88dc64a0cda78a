// termivar dashboard (docs/observability.md, "Dashboard").
//
// Plain JavaScript, no dependencies, nothing fetched but this origin's API.
// The API key is entered once, kept in sessionStorage (this tab only) and
// sent as "Authorization: Bearer" on Connect JSON calls; it never goes into
// a URL. Data is rendered with textContent only (never as HTML): failure
// reasons are a worker's stderr.
"use strict";

(function () {
  const KEY_STORE = "termivar.apiKey";
  const WAIT_SECS = 25;        // long-poll bound (server: at most 30)
  const MIN_GAP_MS = 1000;     // at most one refresh a second while things change
  const RETRY_MS = 3000;       // after a failed call

  let key = sessionStorage.getItem(KEY_STORE) || "";
  let view = null;             // the last OverviewResponse
  let skewSecs = 0;            // node time - local time
  let abort = null;            // aborts the running long-poll
  let immediate = false;       // the next call answers at once (after an action)
  let generation = 0;          // bumps on sign-in/out: old loops stop
  const pendingConfirm = new Map();
  const drawn = new Map();     // section name -> signature of its last drawing

  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- API
  class APIError extends Error {
    constructor(code, message) { super(message); this.code = code; }
  }

  // rpc calls a Connect unary procedure with the JSON protocol.
  async function rpc(procedure, body, signal) {
    let resp;
    try {
      resp = await fetch("/termivar.v1." + procedure, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "Connect-Protocol-Version": "1",
          "Authorization": "Bearer " + key,
        },
        body: JSON.stringify(body || {}),
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
        signal: signal,
      });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new APIError("unavailable", "the node cannot be reached");
    }
    const text = await resp.text();
    let data = {};
    try { data = text ? JSON.parse(text) : {}; } catch (_) { data = {}; }
    if (!resp.ok) {
      throw new APIError(data.code || "http_" + resp.status, data.message || "HTTP " + resp.status);
    }
    return data;
  }

  // ---------------------------------------------------------- utilities
  const num = (v) => (v === undefined || v === null || v === "" ? 0 : Number(v));

  function el(tag, opts, ...children) {
    const e = document.createElement(tag);
    if (opts) {
      for (const [k, v] of Object.entries(opts)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") e.className = v;
        else if (k === "text") e.textContent = v;
        else if (k === "onclick") e.addEventListener("click", v);
        else e.setAttribute(k, v === true ? "" : String(v));
      }
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function nowSecs() { return Date.now() / 1000 + skewSecs; }

  function dur(secs) {
    secs = Math.max(0, Math.round(secs));
    if (secs < 60) return secs + " s";
    if (secs < 3600) return Math.floor(secs / 60) + " min " + (secs % 60) + " s";
    if (secs < 86400) return Math.floor(secs / 3600) + " h " + Math.floor((secs % 3600) / 60) + " min";
    return Math.floor(secs / 86400) + " d " + Math.floor((secs % 86400) / 3600) + " h";
  }
  const ago = (t) => (num(t) ? dur(nowSecs() - num(t)) + " ago" : "—");
  // since is a relative time that tick() keeps current.
  const since = (prefix, t) => (t ? el("span", { "data-since": t, "data-prefix": prefix, text: prefix + ago(t) }) : null);
  const pct = (bp) => (num(bp) / 100).toFixed(0) + "%";

  function table(id, headers, rows, empty) {
    const t = $(id);
    t.replaceChildren();
    const head = el("tr");
    for (const h of headers) head.append(el("th", { class: h.cls, text: h.label }));
    t.append(el("thead", null, head));
    const body = el("tbody");
    if (rows.length === 0) body.append(el("tr", null, el("td", { class: "empty", colspan: headers.length, text: empty })));
    for (const r of rows) body.append(r);
    t.append(body);
  }

  function canAct() { return view && (view.role === "admin" || view.role === "producer"); }

  // ----------------------------------------------------------- messages
  function say(text, isError) {
    const m = $("message");
    m.textContent = text;
    m.className = "message" + (isError ? " error" : "");
    m.hidden = !text;
  }

  // ------------------------------------------------------------ actions
  // A destructive button asks for a second click within 4 s. The armed
  // state is kept by action ID, so it survives a re-render of the table.
  function confirmButton(label, id, action) {
    const armed = pendingConfirm.has(id);
    const b = el("button", { type: "button", class: "danger" + (armed ? " confirm" : ""), "data-action": id, "data-label": label, text: armed ? "Confirm" : label });
    b.addEventListener("click", async () => {
      if (!pendingConfirm.has(id)) {
        pendingConfirm.set(id, setTimeout(() => disarm(id), 4000));
        b.textContent = "Confirm";
        b.classList.add("confirm");
        return;
      }
      clearTimeout(pendingConfirm.get(id));
      pendingConfirm.delete(id);
      b.disabled = true;
      await action();
    });
    return b;
  }

  // A button for a harmless action (one click).
  function actButton(label, id, action) {
    const b = el("button", { type: "button", class: "act", "data-action": id, text: label });
    b.addEventListener("click", async () => { b.disabled = true; await action(); });
    return b;
  }

  function disarm(id) {
    pendingConfirm.delete(id);
    for (const b of document.querySelectorAll("button[data-action]")) {
      if (b.dataset.action !== id) continue;
      b.textContent = b.dataset.label;
      b.classList.remove("confirm");
    }
  }

  async function act(procedure, body, done) {
    try {
      const r = await rpc(procedure, body);
      say(done(r), false);
    } catch (e) {
      say("Refused: " + e.code + ": " + e.message, true);
    }
    drawn.clear(); // redraw everything: a refused action's button is enabled again
    refreshNow();
  }

  const cancelTask = (taskID) => act("Producer/Cancel", { taskId: taskID },
    (r) => r.alreadyCancelled ? "Task " + taskID + " was already cancelled." : "Cancelled task " + taskID + ".");
  const retryTask = (scanID, taskID) => act("Producer/Retry", { scanId: scanID, taskIds: [taskID] },
    (r) => (r.requeued || []).length ? "Re-queued task " + taskID + "." : "Task " + taskID + " was left as it is (" + num(r.unchanged) + " unchanged).");
  const retryScan = (scanID) => act("Producer/Retry", { scanId: scanID, statuses: ["failed", "expired"] },
    (r) => "Re-queued " + (r.requeued || []).length + " failed or expired tasks of scan " + scanID + ".");
  const pauseScan = (scanID, paused) => act("Producer/UpdateScan", { scanId: scanID, paused: paused },
    (r) => (r.paused ? "Paused" : "Resumed") + " scan " + scanID + ".");
  const cancelScan = (scanID) => act("Producer/CancelScan", { scanId: scanID },
    (r) => "Cancelled " + num(r.cancelled) + " tasks of scan " + scanID + " (" + num(r.unchanged) + " unchanged).");

  // ------------------------------------------------------------- render
  // render redraws the sections whose data changed (a table that did not
  // change keeps its nodes, so a click or a selection is not lost).
  function section(name, data, draw) {
    const sig = JSON.stringify([view.role, data]);
    if (drawn.get(name) === sig) return;
    drawn.set(name, sig);
    draw();
  }

  function render(v) {
    view = v;
    skewSecs = num(v.nowSecs) - Date.now() / 1000;
    $("who").textContent = "tenant " + v.tenant + " · " + v.role + " key" + (canAct() ? "" : " (read-only)") + " · revision " + num(v.revision);
    section("totals", v.totals, () => renderTotals(v.totals || {}));
    section("scans", [v.scans, v.scansTotal], () => renderScans(v));
    section("queue", [v.queue, v.queueHead], () => renderQueue(v));
    section("workers", [v.workers, v.workersTotal], () => renderWorkers(v));
    section("leases", [v.leases, v.leasesTotal], () => renderLeases(v));
    section("failures", [v.failures, v.failuresTotal], () => renderFailures(v));
    section("cluster", v.cluster, () => renderCluster(v.cluster || {}));
  }

  const STATUSES = ["queued", "leased", "running", "completed", "failed", "cancelled", "expired"];

  function renderTotals(c) {
    const box = $("totals");
    box.replaceChildren(el("span", { class: "badge" }, "total", el("b", { text: num(c.total) })));
    for (const s of STATUSES) box.append(el("span", { class: "badge st-" + s, "data-status": s }, s, el("b", { text: num(c[s]) })));
  }

  function renderScans(v) {
    const scans = v.scans || [];
    $("scans-count").textContent = "(" + scans.length + " of " + num(v.scansTotal) + ")";
    const box = $("scans");
    box.replaceChildren();
    if (scans.length === 0) box.append(el("p", { class: "empty", text: "No scans yet." }));
    for (const s of scans) box.append(scanCard(s));
  }

  function scanCard(s) {
    const c = s.counts || {};
    const total = num(c.total);
    const done = num(c.completed) + num(c.failed) + num(c.cancelled) + num(c.expired);
    const left = total - done;
    const percent = total ? Math.floor((100 * done) / total) : 0;
    const bar = el("div", { class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total, "aria-valuenow": done, "aria-label": "progress of " + s.scanId });
    for (const part of ["completed", "failed", "expired", "cancelled", "running", "leased"]) {
      const seg = el("span", { class: "seg " + part, title: part + ": " + num(c[part]) });
      seg.style.width = (total ? (100 * num(c[part])) / total : 0) + "%"; // CSSOM, allowed by the CSP
      bar.append(seg);
    }
    const rate = num(s.throughputPerSec);
    const eta = s.etaSecs !== undefined ? dur(num(s.etaSecs)) : (left === 0 ? "done" : "—");
    const state = (s.state || "running").replace(/_/g, " ");
    const head = el("div", { class: "card-head" }, el("strong", { text: s.scanId }),
      el("span", { class: "state st-" + (s.state || "running"), "data-state": s.state || "running", text: s.paused ? state + " (paused)" : state }));
    const actions = el("span", { class: "actions" });
    if (canAct() && num(c.failed) + num(c.expired) > 0) actions.append(actButton("Retry failed", "retry-scan:" + s.scanId, () => retryScan(s.scanId)));
    if (canAct() && left > 0) actions.append(actButton(s.paused ? "Resume" : "Pause", "pause:" + s.scanId, () => pauseScan(s.scanId, !s.paused)));
    if (canAct() && left > 0) actions.append(confirmButton("Cancel scan", "scan:" + s.scanId, () => cancelScan(s.scanId)));
    head.append(actions);
    return el("div", { class: "card", "data-scan": s.scanId, "data-done": done, "data-total": total },
      head, bar,
      el("div", { class: "meta" },
        el("span", { class: "done", text: done + " / " + total + " done (" + percent + "%)" }),
        el("span", { text: "queued " + num(c.queued) }),
        el("span", { text: "running " + (num(c.running) + num(c.leased)) }),
        el("span", { text: "completed " + num(c.completed) }),
        el("span", { class: num(c.failed) ? "st-failed" : "", text: "failed " + num(c.failed) }),
        el("span", { text: "cancelled " + num(c.cancelled) }),
        el("span", { text: "expired " + num(c.expired) })),
      el("div", { class: "meta" },
        el("span", { text: (rate * 60).toFixed(rate * 60 < 10 ? 1 : 0) + " tasks/min" }),
        el("span", { class: "eta", text: "ETA " + eta }),
        el("span", { text: num(s.results) + " results" }),
        since(num(s.finishedAt) ? "finished " : "started ", num(s.finishedAt) || num(s.startedAt))));
  }

  function renderQueue(v) {
    table("queue", [{ label: "Priority" }, { label: "Queued", cls: "num" }, { label: "Oldest queued" }],
      (v.queue || []).map((q) => el("tr", { "data-priority": q.priority },
        el("td", { text: q.priority }), el("td", { class: "num", text: num(q.queued) }),
        num(q.queued) ? el("td", { "data-since": num(q.oldestCreatedAt), text: ago(q.oldestCreatedAt) }) : el("td", { text: "—" }))), "Empty.");
    const hdr = [{ label: "Task" }, { label: "Scan" }, { label: "Priority" }, { label: "Retries", cls: "num wide" }, { label: "" }];
    table("queue-head", hdr, (v.queueHead || []).map((t) => el("tr", { "data-task": t.taskId },
      el("td", { text: t.taskId }), el("td", { text: t.scanId }), el("td", { text: t.priority }),
      el("td", { class: "num wide", text: num(t.retryCount) }),
      el("td", null, canAct() ? confirmButton("Cancel", "task:" + t.taskId, () => cancelTask(t.taskId)) : null))), "Nothing queued.");
  }

  function renderWorkers(v) {
    const ws = v.workers || [];
    $("workers-count").textContent = "(" + num(v.workersTotal) + ")";
    const hdr = [{ label: "Worker" }, { label: "Status" }, { label: "Slots used/eff./decl." },
      { label: "Utilization", cls: "wide" }, { label: "Heartbeat" }, { label: "Done", cls: "num wide" }];
    table("workers", hdr, ws.map((w) => {
      const status = w.dead ? "dead" : w.status;
      const util = "cpu " + pct(w.cpuBasisPoints) + " · mem " + pct(w.memoryBasisPoints) + " · net " + pct(w.networkBasisPoints);
      const slots = el("td", { title: "running tasks / effective slots / declared slots", text: num(w.currentTasks) + " / " + num(w.effectiveSlots) + " / " + num(w.declaredSlots) });
      return el("tr", { "data-worker": w.workerId },
        el("td", { text: w.workerId }), el("td", { class: "st-" + status, text: status }),
        slots,
        el("td", { class: "wide", text: util }),
        el("td", { "data-since": num(w.lastHeartbeat), text: ago(w.lastHeartbeat) }),
        el("td", { class: "num wide", text: num(w.completedTasks) }));
    }), "No workers registered.");
  }

  function renderLeases(v) {
    $("leases-count").textContent = "(" + num(v.leasesTotal) + ")";
    const hdr = [{ label: "Task" }, { label: "Worker" }, { label: "Status" }, { label: "Attempt", cls: "num wide" },
      { label: "Time left" }, { label: "" }];
    table("leases", hdr, (v.leases || []).map((l) => el("tr", { "data-task": l.taskId },
      el("td", { text: l.taskId }), el("td", { text: l.workerId }), el("td", { class: "st-" + l.status, text: l.status }),
      el("td", { class: "num wide", text: num(l.attempt) }),
      el("td", { "data-expires": num(l.expiresAt), text: dur(num(l.expiresAt) - nowSecs()) }),
      el("td", null, canAct() ? confirmButton("Cancel", "task:" + l.taskId, () => cancelTask(l.taskId)) : null))), "No leases.");
  }

  function renderFailures(v) {
    $("failures-count").textContent = "(" + num(v.failuresTotal) + ")";
    const hdr = [{ label: "Task" }, { label: "Scan", cls: "wide" }, { label: "Status" }, { label: "Attempt", cls: "num wide" },
      { label: "When" }, { label: "Reason" }, { label: "" }];
    const final = (f) => f.status === "failed" || f.status === "expired";
    table("failures", hdr, (v.failures || []).map((f) => el("tr", { "data-task": f.taskId },
      el("td", { text: f.taskId }), el("td", { class: "wide", text: f.scanId }),
      el("td", { class: "st-" + f.status, text: final(f) ? f.status : f.status + " (retried)" }),
      el("td", { class: "num wide", text: num(f.attempt) }),
      el("td", { "data-since": num(f.failedAt), text: ago(f.failedAt) }),
      el("td", { class: "reason", text: f.reason || "—" }),
      el("td", null, canAct() && final(f) ? actButton("Retry", "retry:" + f.taskId, () => retryTask(f.scanId, f.taskId)) : null))), "No failures.");
  }

  function renderCluster(c) {
    const facts = [["node", c.nodeId], ["state", c.raftState], ["leader", (c.leaderId || "none") + (c.leaderAddr ? " @ " + c.leaderAddr : "")],
      ["term", num(c.term)], ["commit index", num(c.commitIndex)], ["applied index", num(c.appliedIndex)]];
    const dl = $("cluster");
    dl.replaceChildren();
    for (const [k, v] of facts) dl.append(el("dt", { text: k }), el("dd", { "data-fact": k, text: v === undefined ? "" : v }));
    table("members", [{ label: "Member" }, { label: "Raft address", cls: "wide" }, { label: "Suffrage" }, { label: "Role" }],
      (c.members || []).map((m) => el("tr", { "data-member": m.nodeId },
        el("td", { text: m.nodeId }), el("td", { class: "wide", text: m.raftAddr }), el("td", { text: m.suffrage }),
        el("td", { text: m.leader ? "leader" : "follower" }))), "No membership known.");
  }

  // Relative times tick locally between refreshes (no network).
  function tick() {
    for (const e of document.querySelectorAll("[data-expires]")) e.textContent = dur(num(e.dataset.expires) - nowSecs());
    for (const e of document.querySelectorAll("[data-since]")) e.textContent = (e.dataset.prefix || "") + ago(e.dataset.since);
  }

  // ---------------------------------------------------------- live loop
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  function setLive(ok) {
    const l = $("live");
    l.hidden = false;
    l.textContent = ok ? "live" : "reconnecting";
    l.classList.toggle("stale", !ok);
  }

  // loop long-polls Dashboard.Overview: it answers when the tenant's
  // revision moves (or after WAIT_SECS), so an idle tenant costs one call
  // per WAIT_SECS and a busy one at most one a second.
  async function loop(gen) {
    let rev = null;
    while (gen === generation) {
      const started = Date.now();
      abort = new AbortController();
      try {
        const body = rev === null || immediate ? {} : { afterRevision: rev, waitSecs: WAIT_SECS };
        immediate = false;
        const v = await rpc("Dashboard/Overview", body, abort.signal);
        if (gen !== generation) return;
        render(v);
        rev = String(num(v.revision));
        setLive(true);
      } catch (e) {
        if (gen !== generation) return;
        if (e.name === "AbortError") { rev = null; continue; }
        if (e.code === "unauthenticated" || e.code === "permission_denied") {
          signOut("Sign-in failed: " + e.message);
          return;
        }
        setLive(false);
        say("Cannot refresh: " + e.code + ": " + e.message, true);
        await sleep(RETRY_MS);
        continue;
      }
      const gap = MIN_GAP_MS - (Date.now() - started);
      if (gap > 0) await sleep(gap);
    }
  }

  // refreshNow ends the running long-poll so the loop fetches at once.
  function refreshNow() { immediate = true; if (abort) abort.abort(); }

  // ------------------------------------------------------------ sign-in
  function showSignedIn(on) {
    $("signin").hidden = on;
    $("board").hidden = !on;
    $("signout").hidden = !on;
    if (!on) { $("live").hidden = true; $("who").textContent = ""; }
  }

  function signIn(k) {
    key = k.trim();
    sessionStorage.setItem(KEY_STORE, key);
    generation++;
    say("", false);
    showSignedIn(true);
    loop(generation);
  }

  function signOut(msg) {
    generation++;
    if (abort) abort.abort();
    key = "";
    view = null;
    drawn.clear();
    sessionStorage.removeItem(KEY_STORE);
    showSignedIn(false);
    say(msg || "", Boolean(msg));
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const input = $("key");
      const k = input.value;
      input.value = "";
      if (k.trim()) signIn(k);
    });
    $("signout").addEventListener("click", () => signOut(""));
    setInterval(tick, 1000);
    if (key) signIn(key); else showSignedIn(false);
  });

  // For scripted use and tests: the same calls the buttons make (the
  // server decides what a key may do).
  window.termivarDashboard = Object.freeze({ cancelTask, cancelScan, pauseScan, retryTask, retryScan, refreshNow });
})();
