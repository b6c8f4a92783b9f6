// The pass desk (/desk): the server's browser shows CNKI's check on the <img>, the person's
// mouse, touch and keys go back to it. The token is asked once per browser (localStorage) and
// sent in X-CNKI-Token with every desk request; the server checks it and the origin.
(function () {
  "use strict";
  var KEY = "cnkispider-desk-token", PASS_KEY = "cnkispider-desk-pass";
  var screen = document.getElementById("desk-screen");
  var status = document.getElementById("desk-status");
  var pool = document.getElementById("desk-pool");
  var form = document.getElementById("desk-token-form");
  var retry = document.getElementById("desk-retry");
  var token = "", deskPass = "";
  try { token = window.localStorage.getItem(KEY) || ""; } catch (e) { token = ""; }
  try { deskPass = window.sessionStorage.getItem(PASS_KEY) || ""; } catch (e) { deskPass = ""; }
  // a notification's link: a one-time ticket instead of the token (sessions/tickets.py)
  var ticket = new URLSearchParams(window.location.search).get("ticket") || "";
  if (ticket) window.history.replaceState(null, "", window.location.pathname);
  var running = false, pending = [], sending = false, pressed = false, pointer = null;

  function say(text, state) {
    status.textContent = text;
    if (state) status.setAttribute("data-state", state);
  }

  function headers() {
    var h = { "X-CNKI-Token": token, "Content-Type": "application/json" };
    if (deskPass) h["X-CNKI-Desk-Pass"] = deskPass;
    if (ticket && !token && !deskPass) h["X-CNKI-Desk-Ticket"] = ticket;
    return h;
  }

  function post(path, body) {
    return fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body || {}), credentials: "same-origin" });
  }

  function show(s) {
    say(s.says || s.state, s.state);
    if (s.pool) pool.textContent = s.pool;
    if (s.state === "passed" || s.state === "closed" || s.state === "failed") {
      running = false;
      // no live-looking frame of a browser that is gone; a way to open it again
      screen.hidden = true;
      retry.hidden = s.state === "passed";
    }
  }

  function refused(r) {
    // the page's words (desk.html, in the reader's language); the script holds none of its own
    var words = r.status !== 403 ? status.getAttribute("data-answered").replace("%(status)s", r.status)
      : (ticket && !token && !deskPass) ? status.getAttribute("data-ticket") : status.getAttribute("data-refused");
    say(words, "refused");
    ticket = ""; deskPass = "";
    try { window.localStorage.removeItem(KEY); window.sessionStorage.removeItem(PASS_KEY); } catch (e) { /* private mode */ }
    form.hidden = false;
  }

  function frames() {
    var after = 0;
    function next() {
      if (!running) return;
      fetch("/desk/frame?after=" + after, { headers: headers(), credentials: "same-origin" }).then(function (r) {
        if (r.status === 204) return null;
        if (!r.ok) { running = false; return null; }
        return r.json();
      }).then(function (f) {
        if (f) { after = f.seq; screen.src = "data:image/jpeg;base64," + f.data; screen.hidden = false; }
        next();
      }, function () { window.setTimeout(next, 1000); });
    }
    next();
  }

  function states() {
    if (!running) return;
    fetch("/desk/state", { headers: headers(), credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (s) {
      if (s) show(s);
      if (running) window.setTimeout(states, 700);
    }, function () { window.setTimeout(states, 2000); });
  }

  function open() {
    say(status.getAttribute("data-opening"), "opening");
    retry.hidden = true;
    post("/desk/open").then(function (r) {
      if (!r.ok && r.status !== 503) { refused(r); return null; }
      // 503: the token was right, the server's browser could not start: keep the token
      if (token) { try { window.localStorage.setItem(KEY, token); } catch (e) { /* private mode */ } }
      form.hidden = true;
      return r.json();
    }).then(function (s) {
      if (!s) return;
      if (s.desk_pass) {
        deskPass = s.desk_pass; ticket = "";
        try { window.sessionStorage.setItem(PASS_KEY, deskPass); } catch (e) { /* private mode */ }
      }
      show(s);
      running = s.state !== "passed" && s.state !== "closed" && s.state !== "failed";
      frames();
      states();
    });
  }

  // -- input: in order, batched while one request is on its way ------------------------------

  function flush() {
    if (sending || !pending.length) return;
    sending = true;
    var batch = pending; pending = [];
    post("/desk/input", { events: batch }).then(function () { sending = false; flush(); },
      function () { sending = false; });
  }

  function send(event) { if (running) { pending.push(event); flush(); } }

  function at(e, type) {
    var box = screen.getBoundingClientRect();
    var kind = e.pointerType === "touch" ? "touch" : "mouse";
    return { kind: kind, type: type, pressed: pressed, x: (e.clientX - box.left) / box.width, y: (e.clientY - box.top) / box.height };
  }

  screen.addEventListener("pointerdown", function (e) {
    pressed = true; pointer = e.pointerId;
    screen.setPointerCapture(e.pointerId);
    e.preventDefault();
    send(at(e, "down"));
  });
  screen.addEventListener("pointermove", function (e) {
    if (e.pointerType === "touch" && !pressed) return;
    send(at(e, "move"));
  });
  function up(e) {
    if (!pressed || e.pointerId !== pointer) return;
    pressed = false;
    send(at(e, "up"));
  }
  screen.addEventListener("pointerup", up);
  screen.addEventListener("pointercancel", up);
  screen.addEventListener("contextmenu", function (e) { e.preventDefault(); });
  document.addEventListener("keydown", function (e) {
    if (!running || e.target === document.getElementById("desk-token")) return;
    if (e.key.length === 1 || ["Backspace", "Tab", "Enter", "Escape", "ArrowLeft", "ArrowUp", "ArrowRight", "ArrowDown", "Delete"].indexOf(e.key) >= 0) {
      e.preventDefault();
      send({ kind: "key", key: e.key });
    }
  });

  retry.addEventListener("click", function () { open(); });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    token = document.getElementById("desk-token").value;
    open();
  });

  if (token || deskPass || ticket) open(); else { form.hidden = false; say(status.getAttribute("data-ask"), "token"); }
})();
