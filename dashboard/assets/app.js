// nodeup dashboard: polls the node's JSON API and redraws the tables.
// Every value from the cluster is written with textContent, never as HTML:
// actor, job and node names are chosen by users and may be hostile.
"use strict";

const POLL_MS = 2000;
const TOKEN_KEY = "nodeup-token";

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// A token may come in the URL's fragment (#token=...), which browsers do
// not send to the server; it is moved to session storage and taken off
// the address bar.
function tokenFromFragment() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

class AuthError extends Error {}

async function getJSON(path) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401 || r.status === 403) {
    const body = await r.json().catch(() => ({}));
    throw new AuthError(body.error || r.statusText);
  }
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    throw new Error(path + ": " + (body.error || r.status + " " + r.statusText));
  }
  return r.json();
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = el("td"); td.appendChild(c); tr.appendChild(td); }
    else tr.appendChild(el("td", c === "" || c === undefined || c === null ? "-" : c));
  }
  return tr;
}

function fill(id, rows, empty) {
  const tbody = document.querySelector("#" + id + " tbody");
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    const cols = document.querySelectorAll("#" + id + " thead th").length;
    const td = el("td", empty, "muted");
    td.colSpan = cols;
    const tr = document.createElement("tr");
    tr.appendChild(td);
    tbody.appendChild(tr);
  }
}

function state(s) { return el("span", s, "state state-" + s); }

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
function bytes(n) {
  let i = 0;
  while (n >= 1024 && i < UNITS.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + UNITS[i];
}

function amount(name, v) {
  if (v === undefined) return "-";
  return name === "memory" || name === "object_store_memory" ? bytes(v) : +v.toFixed(4);
}

function resources(set) {
  return Object.keys(set || {}).filter(k => !k.startsWith("node:")).sort()
    .map(k => k + "=" + amount(k, set[k])).join(", ");
}

function bar(used, total) {
  const b = el("span", null, "bar");
  const f = el("span");
  f.style.width = (total > 0 ? Math.min(100, 100 * used / total) : 0) + "%";
  b.appendChild(f);
  return b;
}

function ago(ns) {
  if (!ns) return "never";
  const s = (Date.now() - ns / 1e6) / 1000;
  return s < 1 ? "now" : Math.round(s) + " s ago";
}

function time(ns) { return ns ? new Date(ns / 1e6).toLocaleString() : ""; }

function drawStatus(st) {
  document.getElementById("cluster-name").textContent = st.ClusterName ? "· cluster " + st.ClusterName : "";
  document.getElementById("leader").textContent = st.LeaderName ? st.LeaderName + " (" + st.LeaderAddr + ")" : "none: no quorum of Raft voters";
  const voters = (st.Servers || []).filter(s => s.Suffrage === "voter");
  document.getElementById("voters").textContent = voters.map(s => s.Name || s.ID).join(", ") || "none";
  const nodes = st.Nodes || [];
  const counts = {};
  for (const n of nodes) counts[n.Status] = (counts[n.Status] || 0) + 1;
  document.getElementById("node-counts").textContent =
    Object.keys(counts).sort().map(k => counts[k] + " " + k).join(", ") || "none";
  document.getElementById("security").textContent = st.Insecure
    ? "INSECURE: plaintext between nodes, no tokens (--insecure)"
    : "mutual TLS between nodes, encrypted gossip, tokens; CA " + st.CAHash;

  const total = st.Total || {}, avail = st.Available || {};
  fill("resources", Object.keys(total).filter(k => !k.startsWith("node:")).sort().map(k => {
    const used = total[k] - (avail[k] ?? total[k]);
    return row([k, amount(k, used), amount(k, total[k]), bar(used, total[k])]);
  }), "no alive nodes");
  fill("pending", (st.Pending || []).map(p => row([p.TaskName, resources(p.Resources), p.Count, p.Reason])), "nothing waiting for resources");

  fill("nodes", nodes.map(n => {
    const r = n.Resources || {}, a = n.Available || {};
    const devs = n.GPUs && n.GPUs.devices;
    const gpus = devs && devs.length ? devs.length + " (" + devs.filter(d => d.healthy).length + " healthy)" : (r.GPU ? String(r.GPU) : "");
    const cpu = r.CPU !== undefined ? amount("CPU", r.CPU - (a.CPU ?? r.CPU)) + " / " + amount("CPU", r.CPU) : "";
    const mem = r.memory !== undefined ? bytes(r.memory - (a.memory ?? r.memory)) + " / " + bytes(r.memory) : "";
    const tr = row([n.Name, state(n.Status), n.Address, n.RaftSuffrage || "client", cpu, mem, gpus,
      n.Status === "alive" ? ago(n.LastHeartbeat) : "", n.Version]);
    tr.dataset.node = n.Name;
    tr.dataset.state = n.Status;
    return tr;
  }), "no nodes");
}

function drawActors(list) {
  fill("actors", (list.Actors || []).map(a => row([a.ActorID, a.Class, a.Name, state(a.State), a.NodeName, a.PID || "",
    a.Incarnation, a.DeathCause || a.PendingReason])), "no actors");
}

function drawPGs(list) {
  fill("pgs", (list.Groups || []).map(g => row([g.ID, g.Name, g.Strategy, state(g.State),
    (g.Bundles || []).map(b => b.Index + ":{" + resources(b.Resources) + "}@" + (b.NodeName || "-")).join(" "),
    g.PendingReason])), "no placement groups");
}

let shownLog = "";
async function showLog(id) {
  shownLog = id;
  const pre = document.getElementById("job-log");
  try {
    const r = await getJSON("/v1/jobs/" + encodeURIComponent(id) + "/logs");
    pre.textContent = "--- " + id + " (" + r.size + " bytes) ---\n" + r.logs;
  } catch (e) {
    pre.textContent = "logs of " + id + ": " + e.message;
  }
  pre.hidden = false;
}

function drawJobs(jobs) {
  fill("jobs", (jobs || []).map(j => {
    const b = el("button", "show", "link");
    b.type = "button";
    b.addEventListener("click", () => showLog(j.submission_id));
    return row([j.submission_id, state(j.status), (j.entrypoint || []).join(" "), j.driver_node_name,
      time(j.start_time), time(j.end_time), j.message, b]);
  }), "no jobs");
}

const PENDING = ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER"];

function drawTasks(summary, newest) {
  const by = {};
  for (const s of summary.Summary || []) {
    const r = by[s.Name] || (by[s.Name] = { pending: 0, RUNNING: 0, FINISHED: 0, FAILED: 0 });
    if (PENDING.includes(s.State)) r.pending += s.Count; else r[s.State] = (r[s.State] || 0) + s.Count;
  }
  fill("task-summary", Object.keys(by).sort().map(n => row([n, by[n].pending, by[n].RUNNING, by[n].FINISHED, by[n].FAILED])),
    "no tasks recorded (Go programs report them)");
  const shown = (newest.Tasks || []).length;
  document.getElementById("task-counts").textContent = summary.Total + " tasks recorded" +
    (newest.LeftOut ? "; the newest " + shown + " below, " + newest.LeftOut + " older left out" : "") +
    ((summary.Unreachable || []).length ? "; not answering: " + summary.Unreachable.join(", ") : "");
  fill("tasks", (newest.Tasks || []).map(t => row([t.TaskID, t.Name, state(t.State), t.NodeName, t.PID || "", t.JobID,
    time(Math.min(...Object.values(t.Times || {}).filter(v => v > 0))), t.Error])), "no tasks");
}

const LOGS_SHOWN = 100;
let shownTail = null;
async function showTail(f) {
  shownTail = f;
  const pre = document.getElementById("log-tail");
  try {
    const r = await getJSON("/v1/logs/" + encodeURIComponent(f.Addr) + "/" + encodeURIComponent(f.Name) + "?tail=200");
    pre.textContent = "--- " + r.NodeName + " " + r.Name + " (" + bytes(r.Size) + "), last 200 lines ---\n" + r.Text;
  } catch (e) {
    pre.textContent = "log " + f.Name + ": " + e.message;
  }
  pre.hidden = false;
}

function drawLogs(list) {
  const files = (list.Files || []).filter(f => !f.Backup).sort((a, b) => b.ModTime - a.ModTime);
  document.getElementById("log-counts").textContent = files.length + " worker and actor logs" +
    (files.length > LOGS_SHOWN ? "; the " + LOGS_SHOWN + " written last below" : "") +
    (list.LeftOut ? "; " + list.LeftOut + " more not listed" : "") +
    ((list.Errors || []).length ? "; not answering: " + list.Errors.map(e => e.NodeName).join(", ") : "");
  fill("logs", files.slice(0, LOGS_SHOWN).map(f => {
    const b = el("button", "tail", "link");
    b.type = "button";
    b.addEventListener("click", () => showTail(f));
    const who = f.Kind === "actor" ? (f.Class || "actor") + " " + f.Actor : "task worker";
    return row([f.NodeName, who, f.Job, f.PID, bytes(f.Size), f.Live ? "yes" : "no", time(f.ModTime), b]);
  }), "no worker logs");
}

async function poll() {
  const err = document.getElementById("error");
  try {
    const [st, actors, pgs, jobs, taskSummary, tasks, logs] = await Promise.all([
      getJSON("/v1/status"), getJSON("/v1/actors"), getJSON("/v1/placement-groups"), getJSON("/v1/jobs"),
      getJSON("/v1/tasks?summary=1"), getJSON("/v1/tasks?limit=50"), getJSON("/v1/logs")]);
    drawStatus(st);
    drawActors(actors);
    drawPGs(pgs);
    drawJobs(jobs);
    drawTasks(taskSummary, tasks);
    drawLogs(logs);
    if (shownLog) showLog(shownLog);
    if (shownTail) showTail(shownTail);
    err.textContent = "";
    document.getElementById("token-form").hidden = true;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = "true";
  } catch (e) {
    err.textContent = e.message;
    if (e instanceof AuthError) document.getElementById("token-form").hidden = false;
  }
}

function start() {
  tokenFromFragment();
  document.getElementById("token-form").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
    poll();
  });
  poll();
  setInterval(poll, POLL_MS);
}

start();
