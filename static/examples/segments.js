// Audience segments (SPEC section 15): upload a contact file, see its counts
// or its errors with their line, list and delete segments. The publish key
// goes in the Authorization header, never in a URL; it is not stored.

const $ = (id) => document.getElementById(id);
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

function headers() {
  const key = $("key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function notice(text) {
  $("notice").textContent = text || "";
}

/** The JSON answer of a request, with its status; never throws on HTTP errors. */
async function request(method, path, body) {
  const reply = await fetch(path, { method, headers: headers(), body, cache: "no-store" });
  let data = null;
  try {
    data = await reply.json();
  } catch {
    data = { error: { code: "bad_answer", message: `HTTP ${reply.status}` } };
  }
  return { status: reply.status, data };
}

function count(n) {
  return typeof n === "number" ? n.toLocaleString() : "—";
}

function showCounts(dl, fields) {
  dl.replaceChildren();
  for (const [label, value] of fields) {
    if (value === undefined) continue;
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.textContent = value;
    dl.append(dt, dd);
  }
}

function showResult(status, data) {
  const box = $("result");
  box.hidden = false;
  const error = data && data.error;
  box.dataset.state = error ? "error" : "ok";
  if (!error) {
    $("result-title").textContent = `Segment ${data.name} uploaded`;
    $("result-message").textContent = `${count(data.valid)} valid unique entries from ${count(data.rows)} rows in ${data.seconds} s.`;
    showCounts($("result-counts"), [
      ["Rows", count(data.rows)], ["Valid", count(data.valid)],
      ["Invalid", count(data.invalid)], ["Duplicates", count(data.duplicates)],
      ["Values", data.hashed === "sha256" ? "SHA-256" : data.hashed.toUpperCase()],
    ]);
    return;
  }
  $("result-title").textContent = `Refused: ${error.code}`;
  const where = typeof error.line === "number" ? ` (line ${error.line})` : "";
  $("result-message").textContent = `${error.message}${where}`;
  showCounts($("result-counts"), [
    ["HTTP status", String(status)],
    ["Line", typeof error.line === "number" ? String(error.line) : undefined],
    ["Valid", error.valid === undefined ? undefined : count(error.valid)],
    ["Invalid", error.invalid === undefined ? undefined : count(error.invalid)],
    ["Duplicates", error.duplicates === undefined ? undefined : count(error.duplicates)],
  ]);
}

/** POST the file with upload progress (fetch cannot report it). */
function send(path, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    for (const [k, v] of Object.entries(headers())) xhr.setRequestHeader(k, v);
    xhr.setRequestHeader("Content-Type", "text/csv");
    xhr.responseType = "text";
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      let data;
      try {
        data = JSON.parse(xhr.responseText);
      } catch {
        data = { error: { code: "bad_answer", message: `HTTP ${xhr.status}` } };
      }
      resolve({ status: xhr.status, data });
    };
    xhr.onerror = () => reject(new Error("the upload failed (network error)"));
    xhr.send(file);
  });
}

async function upload(event) {
  event.preventDefault();
  notice("");
  const name = $("name").value.trim();
  const file = $("file").files[0];
  if (!NAME.test(name)) {
    notice("A segment name is 1 to 64 letters, digits, '_', '.' or '-'.");
    return;
  }
  if (!file) {
    notice("Choose a file.");
    return;
  }
  const hashed = $("hashed").value;
  const path = `/api/segments/${encodeURIComponent(name)}${hashed ? `?hashed=${hashed}` : ""}`;
  const progress = $("progress");
  progress.hidden = false;
  progress.value = 0;
  $("send").disabled = true;
  try {
    const { status, data } = await send(path, file, (f) => { progress.value = f; });
    showResult(status, data);
    if (status === 200) await refresh();
  } catch (e) {
    notice(e.message);
  } finally {
    progress.hidden = true;
    $("send").disabled = false;
  }
}

function updated(seconds) {
  if (typeof seconds !== "number") return "—";
  return new Date(seconds * 1000).toLocaleString();
}

async function remove(name) {
  notice("");
  const { status, data } = await request("DELETE", `/api/segments/${encodeURIComponent(name)}`);
  if (status !== 200) notice(`Deleting ${name}: ${data.error ? data.error.message : status}`);
  await refresh();
}

async function refresh() {
  let answer;
  try {
    answer = await request("GET", "/api/segments");
  } catch (e) {
    notice(`Listing segments failed: ${e.message}`);
    return;
  }
  const { status, data } = answer;
  const rows = $("segment-rows");
  if (status !== 200) {
    rows.replaceChildren();
    $("empty").hidden = true;
    notice(`Listing segments: ${data.error ? data.error.message : status}`);
    return;
  }
  rows.replaceChildren(...data.segments.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.name = s.name;
    for (const text of [s.name, count(s.valid), count(s.rows), count(s.invalid),
                        count(s.duplicates), updated(s.updated)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    const td = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "pe-quiet";
    button.textContent = "Delete";
    button.addEventListener("click", () => remove(s.name));
    td.append(button);
    tr.append(td);
    return tr;
  }));
  $("empty").hidden = data.segments.length > 0;
}

$("upload").addEventListener("submit", upload);
$("refresh").addEventListener("click", refresh);
$("key").addEventListener("change", refresh);
refresh();
