// The playground: an EventSource client of /v1/agent/runs.
//
// Why it is built this way:
// - A run lives on the server, independent of this page. The page keeps
//   {run_id, stream_url, conversation_id} in sessionStorage, so a reload re-opens the
//   stream with ?after=0 and re-renders the whole run from its event log.
// - EventSource reconnects on its own and sends Last-Event-ID (the server prefers it
//   over ?after), so a dropped network resumes without gaps. A finished run answers
//   204 on reconnect, which makes the browser stop.
// - Every piece of model or tool output goes into the DOM as text (textContent /
//   createTextNode), never as HTML; links are only made from http(s) URLs. Answers are
//   Markdown, rendered by markdown.js, which builds elements and never parses HTML.
// - The streamed text is the answer while it is being written; the final `response`
//   event replaces it (with its citations linked to numbered source cards), so the
//   answer is shown once.
// - A reload restores the conversation: earlier turns come from
//   GET /v1/agent/conversations/{id}, the current run is replayed from its event log.
"use strict";

(() => {
  const STORE_RUN = "agentchat.run";
  const STORE_CONVERSATION = "agentchat.conversation";
  const STORE_TOKEN = "agentchat.token";
  const STORE_CONTEXT = "agentchat.context";
  const STORE_DECISIONS = "agentchat.decisions";
  const md = window.AgentMarkdown;
  const { documentKey } = window.AgentSourceKey;
  const CONTEXT_EXAMPLES = {
    workflow: '{"workflow_id": ""}',
    tables: '{"config_id": ""}',
    knowledge: "{}",
  };
  const QUESTION_EXAMPLES = {
    workflow: "e.g. Create a workflow that emails me when stock runs low",
    tables: "e.g. Show products with fewer than 10 in stock, lowest first",
    knowledge: "e.g. How do I resume a stream after a disconnect?",
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    transcript: $("transcript"),
    empty: $("empty"),
    form: $("ask"),
    message: $("message"),
    context: $("context"),
    contextError: $("context-error"),
    formError: $("form-error"),
    send: $("send"),
    stop: $("stop"),
    newConversation: $("new-conversation"),
    token: $("token"),
    conn: $("conn"),
    conversation: $("conversation"),
    history: $("history"),
    provider: $("provider"),
    offline: $("offline"),
    template: $("run-template"),
    attach: $("attach"),
    attachFile: $("attach-file"),
    chips: $("attachment-chips"),
    attachNote: $("attach-note"),
  };

  /** The run being shown and followed: {info, view, es, lastSeq, done}. */
  let current = null;
  /** True once the context picker shows a choice (restored or the user's): offline mode
   *  then leaves it alone instead of switching to Knowledge. */
  let contextChosen = false;

  // --- small DOM helpers (text only) ----------------------------------------------------

  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const safeHref = md.safeHref;

  /** A source's location without server paths: a URL stays, a file path keeps its name. */
  function displayLocation(location) {
    const text = asText(location).trim();
    if (!text) return "";
    if (safeHref(text) && /^https?:/i.test(text)) return text;
    if (/^(file:|\/|~[\\/]|[A-Za-z]:[\\/]|\\\\)/.test(text) || /(^|[\\/])\.\.([\\/]|$)/.test(text)) {
      return text.split(/[\\/]/).filter(Boolean).pop() || "";
    }
    return text;
  }

  /** The short reason a tool failed, from whatever shape it came in. */
  function reasonOf(value) {
    if (value === null || value === undefined || value === "") return "";
    if (typeof value === "string") {
      const parsed = parse(value);
      return parsed && typeof parsed === "object" ? reasonOf(parsed) : value;
    }
    if (typeof value !== "object") return asText(value);
    const main = value.reason || value.message || value.detail || value.error;
    if (main && typeof main === "object") return reasonOf(main);
    const code = value.code || value.status;
    const text = main ? asText(main) : JSON.stringify(value);
    return code && !text.includes(asText(code)) ? `${text} (${asText(code)})` : text;
  }

  function parse(data) {
    try {
      return JSON.parse(data);
    } catch {
      return null;
    }
  }

  function asText(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "string") return value;
    return JSON.stringify(value);
  }

  function readStored(key) {
    const raw = sessionStorage.getItem(key);
    return raw ? parse(raw) : null;
  }

  function authHeaders() {
    const token = ui.token.value.trim();
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  function setConn(text) {
    ui.conn.textContent = text;
  }

  function setBusy(busy) {
    ui.send.disabled = busy;
    ui.stop.disabled = !busy;
    for (const button of ui.transcript.querySelectorAll("button.decide")) {
      button.disabled = busy || button.dataset.decided === "true";
    }
  }

  function showConversation() {
    ui.conversation.textContent = sessionStorage.getItem(STORE_CONVERSATION) || "new";
  }

  // --- the run view ----------------------------------------------------------------------

  function newRunView(info) {
    const node = ui.template.content.firstElementChild.cloneNode(true);
    node.dataset.runId = info.run_id;
    node.querySelector(".question").textContent = info.question || "(question)";
    node.querySelector(".run-id").textContent = info.run_id;
    ui.empty.hidden = true;
    ui.transcript.append(node);
    return {
      root: node,
      status: node.querySelector(".run-status"),
      selection: node.querySelector(".selection"),
      selectionBody: node.querySelector(".selection-body"),
      tools: node.querySelector(".tools"),
      previews: node.querySelector(".previews"),
      answer: node.querySelector(".answer"),
      text: "",
      responded: false,
      after: "",
      pendingDraw: null,
      final: node.querySelector(".final"),
      clarification: node.querySelector(".clarification"),
      errors: node.querySelector(".errors"),
      toolItems: new Map(),
    };
  }

  function setRunStatus(view, status, text) {
    view.root.dataset.status = status;
    view.status.textContent = text || status;
  }

  function addError(view, text) {
    view.errors.append(el("p", null, text));
  }

  /** Re-render the streamed Markdown at most once a frame. */
  function scheduleAnswer(view) {
    if (view.pendingDraw) return;
    const draw = () => {
      if (view.pendingDraw !== draw) return; // drawn already (flushAnswer)
      view.pendingDraw = null;
      if (view.responded) {
        if (!view.after.trim()) return;
        let extra = view.answer.querySelector(".after-answer");
        if (!extra) {
          extra = el("div", "after-answer");
          view.answer.append(extra);
        }
        extra.replaceChildren(md.render(view.after));
      } else {
        view.answer.replaceChildren(md.render(view.text));
      }
    };
    view.pendingDraw = draw;
    if (document.hidden) setTimeout(draw, 0);
    else requestAnimationFrame(draw);
  }

  /** Draw a scheduled answer now: a run shown as finished must already show its last words
   *  (the end arrives in the same frame as the chunks before it). */
  function flushAnswer(view) {
    if (view.pendingDraw) view.pendingDraw();
  }

  /** Source cards (one per document) and a resolver from cited ids to card numbers. */
  function sourceCards(view, sources) {
    const cards = [];
    const byKey = new Map();
    const byId = new Map();
    // One card per document, by the rule the server counts sources with (source_key.js).
    const docOf = (s) => documentKey(asText(s.id), "", asText(s.metadata && s.metadata.doc_id));
    for (const s of Array.isArray(sources) ? sources : []) {
      if (!s || typeof s !== "object") continue;
      const href = safeHref(s.url);
      const key = documentKey(asText(s.id), href, asText(s.metadata && s.metadata.doc_id)) || asText(s.title);
      let card = byKey.get(key);
      if (!card) {
        card = { n: cards.length + 1, source: s, href, anchor: `src-${view.root.dataset.runId}-${cards.length + 1}` };
        cards.push(card);
        byKey.set(key, card);
      }
      if (s.id) byId.set(asText(s.id), card);
      const doc = docOf(s);
      if (doc && !byId.has(doc)) byId.set(doc, card);
    }
    const resolve = (id) => byId.get(id) || byId.get(id.split("#")[0]) || null;
    return { cards, resolve };
  }

  function renderAnswer(view, answer, sources) {
    const { cards, resolve } = sourceCards(view, sources);
    const cite = (id) => {
      const card = resolve(id);
      if (!card) return null;
      const a = el("a", "cite", `[${card.n}]`);
      a.href = `#${card.anchor}`;
      a.title = asText(card.source.title || id);
      a.dataset.source = id;
      return a;
    };
    view.answer.replaceChildren(md.render(answer, { cite }));
    const list = view.final.querySelector(".sources");
    list.replaceChildren();
    for (const card of cards) {
      const s = card.source;
      const title = asText(s.title || (card.href ? s.url : "") || asText(s.id).split("#")[0] || "source");
      const heading = card.href ? el("a", "source-title", title) : el("span", "source-title", title);
      if (card.href) {
        heading.href = card.href;
        heading.target = "_blank";
        heading.rel = "noopener noreferrer";
      }
      const item = el("li", "source-card", heading);
      item.id = card.anchor;
      item.dataset.n = String(card.n);
      const where = card.href ? card.href : displayLocation(s.location);
      if (where) item.append(el("span", card.href ? "source-url" : "source-location", where));
      if (s.kind) item.append(el("span", "source-kind", asText(s.kind)));
      list.append(item);
    }
    list.hidden = cards.length === 0;
    const heading = view.final.querySelector(".sources-heading");
    if (heading) heading.hidden = cards.length === 0;
    return cards.length;
  }

  function loadDecisions() {
    return parse(sessionStorage.getItem(STORE_DECISIONS) || "{}") || {};
  }

  /** Accept / Reject under a preview. Accept asks a follow-up; Reject dismisses it. */
  function decisionButtons(view, box, { key, acceptMessage, rejectNote }) {
    const decision = el("p", "decision");
    decision.setAttribute("role", "status");
    const accept = el("button", "decide accept", "Accept");
    const reject = el("button", "decide reject secondary", "Reject");
    accept.type = reject.type = "button";
    const settle = (choice) => {
      accept.dataset.decided = reject.dataset.decided = "true";
      accept.disabled = reject.disabled = true;
      box.dataset.decision = choice;
      decision.textContent = choice === "accepted" ? "Accepted — the agent was told." : rejectNote;
    };
    const remember = (choice) => {
      const all = loadDecisions();
      all[key] = choice;
      sessionStorage.setItem(STORE_DECISIONS, JSON.stringify(all));
    };
    accept.addEventListener("click", () => {
      settle("accepted");
      remember("accepted");
      ask(acceptMessage);
    });
    reject.addEventListener("click", () => {
      settle("rejected");
      remember("rejected");
    });
    accept.disabled = reject.disabled = !current || !current.done;
    box.append(el("div", "buttons", accept, reject), decision);
    const earlier = loadDecisions()[key];
    if (earlier) settle(earlier);
  }

  /** Disable the Approve / Edit / Reject buttons of approvals still open in `view`. */
  function settleApprovals(view, text) {
    for (const box of view.previews.querySelectorAll(".approval:not([data-decision])")) {
      box.dataset.decision = "decided";
      for (const b of box.querySelectorAll("button")) b.disabled = true;
      box.querySelector(".decision").textContent = text;
    }
  }

  /** Approve / Edit / Reject a call the run waits on: the decision goes to the server
   *  (owner only), and the run is followed on from the stream_url it answers. */
  function approvalButtons(view, box, d, args) {
    const note = el("p", "decision");
    note.setAttribute("role", "status");
    const approve = el("button", "decide approve", "Approve");
    const edit = el("button", "decide edit secondary", "Edit");
    const reject = el("button", "decide reject secondary", "Reject");
    const buttons = [approve, edit, reject];
    for (const b of buttons) b.type = "button";
    const send = async (decision, edited) => {
      for (const b of buttons) b.disabled = true;
      note.textContent = "Sending…";
      const body = edited === undefined ? { decision } : { decision, arguments: edited };
      const url = `/v1/agent/runs/${encodeURIComponent(view.root.dataset.runId)}` +
        `/approvals/${encodeURIComponent(asText(d.tool_use_id))}`;
      let response;
      try {
        response = await fetch(url, {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "application/json", ...authHeaders() },
          body: JSON.stringify(body),
        });
      } catch (err) {
        note.textContent = `Could not reach the server: ${err}`;
        for (const b of buttons) b.disabled = false;
        return;
      }
      if (!response.ok) {
        note.textContent = `Not sent — ${await problemText(response)}`;
        if (response.status !== 409) for (const b of buttons) b.disabled = false;
        return;
      }
      const accepted = await response.json();
      box.dataset.decision = decision;
      args.readOnly = true;
      note.textContent = { approve: "Approved — running it.", edit: "Edited and approved — running it.",
        reject: "Rejected — the agent was told." }[decision];
      const run = view.run;
      if (run && !run.done && accepted && typeof accepted.stream_url === "string") {
        run.waiting = false;
        current = run;
        listen(run, accepted.stream_url, { replay: false });
      }
    };
    approve.addEventListener("click", () => send("approve"));
    reject.addEventListener("click", () => send("reject"));
    edit.addEventListener("click", () => {
      if (args.readOnly) {
        args.readOnly = false;
        edit.textContent = "Send edit";
        args.focus();
        return;
      }
      const parsed = parse(args.value);
      if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
        note.textContent = "The arguments must be a JSON object.";
        return;
      }
      send("edit", parsed);
    });
    box.append(el("div", "buttons", approve, edit, reject), note);
  }

  // --- event renderers -------------------------------------------------------------------

  const render = {
    run_started(view) {
      setRunStatus(view, "running", "running");
    },

    tool_selection(view, d) {
      const body = view.selectionBody;
      body.replaceChildren();
      const row = (term, value) => body.append(el("dt", null, term), el("dd", null, value));
      row("Context", asText(d.context_type));
      row("Core", (d.core || []).join(", ") || "none");
      const rag = (d.rag || []).map((r) => `${r.name} (${Number(r.score).toFixed(3)})`);
      row("Search", rag.join(", ") || "none");
      row("Fallback", d.fallback ? asText(d.fallback) : "no");
      row("Offered", (d.tools || []).join(", ") || "none");
      view.selection.querySelector("summary").textContent =
        `Tool selection: ${(d.tools || []).length} tools${d.fallback ? " (fallback)" : ""}`;
      view.selection.hidden = false;
    },

    message_start(view) {
      view.breakNext = true;
    },

    content_chunk(view, d) {
      const chunk = asText(d.chunk);
      if (view.responded) {
        view.after += chunk;
      } else {
        if (view.breakNext && view.text && !/\n\n$/.test(view.text)) view.text += "\n\n";
        view.text += chunk;
      }
      view.breakNext = false;
      scheduleAnswer(view);
    },

    tool_call_start(view, d) {
      const item = el(
        "li",
        "tool",
        el("span", "spinner", null),
        el("span", "tool-name", asText(d.name)),
        el("span", "tool-state", "running…"),
      );
      item.querySelector(".spinner").setAttribute("aria-hidden", "true");
      item.dataset.state = "running";
      item.dataset.toolUseId = asText(d.tool_use_id);
      view.toolItems.set(d.tool_use_id, item);
      view.tools.append(item);
      view.breakNext = true;
    },

    tool_call_result(view, d) {
      let item = view.toolItems.get(d.tool_use_id);
      if (!item) {
        render.tool_call_start(view, d);
        item = view.toolItems.get(d.tool_use_id);
      }
      item.querySelector(".spinner")?.remove();
      item.dataset.state = d.is_error ? "error" : "ok";
      const ms = Number(d.duration_ms);
      item.querySelector(".tool-state").textContent =
        `${d.is_error ? "failed" : "ok"}${Number.isFinite(ms) ? ` · ${Math.round(ms)} ms` : ""}`;
      if (d.is_error) {
        const reason = reasonOf(d.error ?? d.reason ?? d.detail ?? d.message);
        // Without a reason in the event, the run's stored tool result supplies it when it ends.
        setToolReason(item, reason || "", !reason);
      } else if (typeof d.summary === "string" && d.summary.trim()) {
        setToolSummary(item, d.summary);
      }
    },

    workflow_preview(view, d) {
      const wf = d.workflow && typeof d.workflow === "object" ? d.workflow : {};
      const actions = Array.isArray(wf.actions) ? wf.actions : [];
      const edges = Array.isArray(wf.edges) ? wf.edges : [];
      const box = el("section", "preview workflow-preview");
      box.setAttribute("aria-label", "Workflow preview");
      const title = d.is_update ? `Workflow preview: update of ${asText(d.workflow_id)}` : "Workflow preview: new workflow";
      box.append(el("h3", null, title));
      if (d.description) box.append(el("p", "preview-description", asText(d.description)));
      if (wf.name) box.append(el("p", null, `Name: ${asText(wf.name)}${wf.is_active === false ? " (inactive)" : ""}`));

      const names = new Map();
      actions.forEach((a, i) => {
        const name = a && a.name ? asText(a.name) : `action ${i + 1}`;
        names.set(`temp:${i}`, name);
        if (a && a.id) names.set(asText(a.id), name);
      });
      const nameOf = (id) => names.get(asText(id)) || asText(id);

      box.append(el("h4", null, `Actions (${actions.length})`));
      const list = el("ol", "actions");
      for (const a of actions) {
        const kind = a && a.action_type ? ` — ${asText(a.action_type)}` : "";
        const item = el("li", null, el("strong", null, a && a.name ? asText(a.name) : "(unnamed)"), kind);
        if (a && a.description) item.append(el("div", "action-description", asText(a.description)));
        list.append(item);
      }
      box.append(list);

      box.append(el("h4", null, `Edges (${edges.length})`));
      const edgeList = el("ul", "edges");
      for (const e of edges) {
        let text;
        if (e && (e.edge_type === "start" || !e.source_action_id)) {
          text = `start → ${nameOf(e && e.target_action_id)}`;
        } else {
          const port = e.source_output ? ` [${asText(e.source_output)}]` : "";
          text = `${nameOf(e.source_action_id)}${port} → ${nameOf(e.target_action_id)}`;
        }
        edgeList.append(el("li", null, text));
      }
      box.append(edgeList);
      const what = wf.name ? ` “${asText(wf.name)}”` : "";
      const index = view.previews.querySelectorAll(".workflow-preview").length;
      decisionButtons(view, box, {
        key: `${view.root.dataset.runId}:workflow:${index}`,
        acceptMessage: d.is_update
          ? `I accept the proposed changes to the workflow${what}. Save them.`
          : `I accept the proposed workflow${what}. Save this workflow.`,
        rejectNote: "Rejected — the preview was dismissed and nothing was saved.",
      });
      view.previews.append(box);
    },

    table_config_preview(view, d) {
      const config = d.config && typeof d.config === "object" ? d.config : {};
      const box = el("section", "preview table-preview");
      box.setAttribute("aria-label", "Table configuration preview");
      const label = d.name ? ` “${asText(d.name)}”` : "";
      box.append(el("h3", null, `Table configuration preview${label}${d.is_update ? " (update)" : " (new)"}`));
      if (d.description) box.append(el("p", "preview-description", asText(d.description)));
      const sources = Array.isArray(config.data_source) ? config.data_source : [];
      sources.forEach((ds, i) => {
        if (!ds || typeof ds !== "object") return;
        box.append(el("h4", null, `Data source ${i + 1}: ${asText(ds.source)}${ds.type ? ` (${asText(ds.type)})` : ""}`));
        const select = ds.select && typeof ds.select === "object" ? ds.select : {};
        box.append(table("Columns", ["Name", "Alias", "Table column"], (select.columns || []).map(
          (c) => [c && c.name, c && c.alias, c && c.table_column])));
        box.append(table("Filters", ["Column", "Operator", "Value"], (ds.filters || []).map(
          (f) => [f && f.column, f && f.operator, f && f.value])));
        box.append(table("Sorts", ["Column", "Direction", "Priority"], (ds.sort || []).map(
          (s) => [s && s.column, s && s.direction, s && s.priority])));
      });
      if (!sources.length) box.append(el("p", null, "(no data sources)"));
      const what = d.name ? ` “${asText(d.name)}”` : "";
      const index = view.previews.querySelectorAll(".table-preview").length;
      decisionButtons(view, box, {
        key: `${view.root.dataset.runId}:table:${index}`,
        acceptMessage: `I accept the proposed table configuration${what}.`,
        rejectNote: "Rejected — the preview was dismissed and nothing was saved.",
      });
      view.previews.append(box);
    },

    approval_required(view, d) {
      const box = el("section", "preview approval");
      box.setAttribute("aria-label", "Approval required");
      box.dataset.toolUseId = asText(d.tool_use_id);
      box.append(el("h3", null, `Approval required: ${asText(d.name)}`));
      if (d.reason) box.append(el("p", "preview-description", asText(d.reason)));
      const args = el("textarea", "approval-arguments");
      args.setAttribute("aria-label", "Arguments of the call");
      args.value = JSON.stringify(d.arguments && typeof d.arguments === "object" ? d.arguments : {}, null, 2);
      args.rows = Math.min(12, args.value.split("\n").length + 1);
      args.readOnly = true;
      box.append(args);
      approvalButtons(view, box, d, args);
      view.previews.append(box);
      setRunStatus(view, "waiting", "waiting for your approval");
      const item = view.toolItems.get(d.tool_use_id);
      if (item && item.dataset.state === "running") {
        item.querySelector(".tool-state").textContent = "waiting for approval";
      }
    },

    table_config_validation_error(view, d) {
      const box = el("section", "preview invalid");
      box.setAttribute("aria-label", "Table configuration errors");
      box.append(el("h3", null, "The table configuration is not valid"));
      const list = el("ul", "validation-errors");
      for (const e of Array.isArray(d.errors) ? d.errors : []) list.append(el("li", null, asText(e)));
      box.append(list);
      view.previews.append(box);
    },

    clarification(view, d) {
      const kind = d.type === "overload" ? "The question is too broad" : "More information is needed";
      view.clarification.replaceChildren(el("strong", null, kind), " ");
      const info = d.missing_info;
      if (Array.isArray(info)) {
        const list = el("ul");
        for (const item of info) list.append(el("li", null, asText(item)));
        view.clarification.append(list);
      } else {
        view.clarification.append(el("span", null, asText(info)));
      }
      view.clarification.hidden = false;
    },

    response(view, d) {
      // The final answer replaces the streamed text: shown once, with its citations linked.
      view.responded = true;
      view.after = "";
      const answer = asText(d.answer) || view.text;
      const cited = renderAnswer(view, answer, d.sources);
      view.final.querySelector(".final-meta").textContent = responseMeta(d, cited);
      view.final.hidden = !cited && !view.final.querySelector(".final-meta").textContent;
    },

    message_complete(view, d) {
      flushAnswer(view);
      const status = ["completed", "failed", "cancelled"].includes(d.status) ? d.status : "completed";
      setRunStatus(view, status);
      if (status === "completed") feedbackButtons(view);
      if (status === "failed" && !view.errors.childElementCount) addError(view, "The run failed.");
      for (const item of view.toolItems.values()) {
        if (item.dataset.state === "running") {
          item.querySelector(".spinner")?.remove();
          item.dataset.state = "error";
          item.querySelector(".tool-state").textContent = status === "cancelled" ? "cancelled" : "unfinished";
        }
      }
    },
  };

  /** Thumbs up / down under a finished answer: POST /v1/agent/runs/{id}/feedback (a second
   *  click replaces the first); the pressed one stays marked. */
  function feedbackButtons(view) {
    if (view.root.querySelector(".feedback")) return;
    const runId = view.root.dataset.runId;
    const note = el("span", "feedback-note");
    note.setAttribute("role", "status");
    const box = el("div", "feedback");
    const send = async (score, button) => {
      note.textContent = "sending…";
      try {
        const response = await fetch(`/v1/agent/runs/${encodeURIComponent(runId)}/feedback`, {
          method: "POST",
          headers: { "Content-Type": "application/json", ...authHeaders() },
          body: JSON.stringify({ score }),
        });
        if (!response.ok) {
          note.textContent = `feedback not saved: ${await problemText(response)}`;
          return;
        }
        for (const b of box.querySelectorAll("button")) b.setAttribute("aria-pressed", String(b === button));
        note.textContent = "thanks";
      } catch (err) {
        note.textContent = `feedback not saved: ${err}`;
      }
    };
    for (const [score, label, text] of [[1, "Good answer", "\u25B2 Good"], [-1, "Bad answer", "\u25BC Bad"]]) {
      const button = el("button", "secondary thumb", text);
      button.type = "button";
      button.title = label;
      button.setAttribute("aria-label", label);
      button.setAttribute("aria-pressed", "false");
      button.dataset.score = String(score);
      button.addEventListener("click", () => send(score, button));
      box.append(button);
    }
    box.append(note);
    view.errors.before(box);
  }

  /** The line under an answer. The confidence is shown only for an answer that rests on
   *  the sources it cites: a refusal or "I could not find an answer" cites none, and a
   *  score there (the offline answerer sends 1.0 with a refusal) would read as certainty. */
  function responseMeta(d, cited) {
    const meta = [];
    if (cited && typeof d.confidence_score === "number") meta.push(`confidence ${d.confidence_score.toFixed(2)}`);
    if (d.used_internal_kb) meta.push("knowledge base");
    if (d.used_external_kb) meta.push("web");
    return meta.join(" · ");
  }

  function table(caption, headings, rows) {
    const t = el("table");
    t.append(el("caption", null, caption));
    const head = el("tr");
    for (const h of headings) {
      const th = el("th", null, h);
      th.scope = "col";
      head.append(th);
    }
    t.append(el("thead", null, head));
    const body = el("tbody");
    if (!rows.length) {
      const td = el("td", "none", "none");
      td.colSpan = headings.length;
      body.append(el("tr", null, td));
    }
    for (const r of rows) body.append(el("tr", null, ...r.map((v) => el("td", null, asText(v)))));
    t.append(body);
    return t;
  }

  // --- following a run -------------------------------------------------------------------

  function withParam(url, key, value) {
    const u = new URL(url, window.location.href);
    u.searchParams.set(key, value);
    return u.pathname + u.search;
  }

  function follow(info, { replay, onReplayFailed = null }) {
    const view = newRunView(info);
    const url = replay ? withParam(info.stream_url, "after", "0") : info.stream_url;
    const run = { info, view, es: null, lastSeq: 0, done: false, waiting: false, refusals: 0, refusedMs: 0, lookedAt: 0 };
    view.run = run;
    current = run;
    listen(run, url, { replay, onReplayFailed });
  }

  /** Follow `run` from `url`: again after an approval, whose decision answers a fresh
   *  stream_url (a run waiting for a decision ends its stream after approval_required). */
  function listen(run, url, { replay, onReplayFailed = null }) {
    const view = run.view;
    const es = new EventSource(url);
    run.es = es;
    setBusy(true);
    setConn("connecting…");

    const on = (name) => {
      es.addEventListener(name, (e) => {
        const seq = Number(e.lastEventId);
        if (Number.isFinite(seq) && seq > 0) {
          if (seq <= run.lastSeq) return; // already rendered
          run.lastSeq = seq;
        }
        const data = parse(e.data);
        if (data === null || typeof data !== "object") return;
        if (name === "approval_required") {
          run.waiting = true;
        } else if (run.waiting) {
          run.waiting = false; // a replay past a decision taken earlier
          settleApprovals(view, "Decided.");
        }
        render[name](view, data);
        if (name === "message_complete") finish(run, data.status);
      });
    };
    for (const name of Object.keys(render)) on(name);

    es.addEventListener("heartbeat", () => setConn("connected"));
    es.addEventListener("open", () => {
      run.refusals = 0; // the stream answers: a later refusal starts the waits afresh
      setConn("connected");
    });
    // Both the server's `error` event and the browser's own connection errors arrive
    // here; only the server's carries data.
    es.addEventListener("error", (e) => {
      if (typeof e.data === "string") {
        const seq = Number(e.lastEventId);
        if (Number.isFinite(seq) && seq > 0) {
          if (seq <= run.lastSeq) return;
          run.lastSeq = seq;
        }
        const d = parse(e.data) || {};
        addError(view, `Error${d.code ? ` (${d.code})` : ""}: ${asText(d.message || e.data)}${hintFor(d.code)}`);
        return;
      }
      if (run.done) return;
      if (run.waiting) {
        // The run waits for a decision (stored, held by no server): its stream ended.
        es.close();
        setConn("waiting for your decision");
        return;
      }
      if (es.readyState === EventSource.CLOSED && replay && run.lastSeq === 0 && onReplayFailed) {
        // The run's link expired (or the run is gone): show its turn from the conversation.
        run.done = true;
        es.close();
        view.root.remove();
        if (current === run) {
          current = null;
          setBusy(false);
          setConn("idle");
        }
        onReplayFailed();
        return;
      }
      if (es.readyState === EventSource.CLOSED) {
        if (run.refusals === 0) {
          resumeLater(run, url);
        } else {
          // A stream the page opened again after a 200 was refused before it opened (a
          // load balancer sending the ask to one replica and the stream to a refusing
          // one): a refused attempt like any other, waited out before the next ask -
          // else the page asked again at once, for ever.
          es.close();
          waitToResume(run, url, null, "the stream was refused");
        }
      } else {
        setConn("reconnecting…");
      }
    });
  }

  /** How long a stream refused with 503 (refused attempts in a row) is asked again before
   *  the page gives up: a database outage that lasts minutes keeps the run (it is carried
   *  on once the database is back), so the page waits as long. A count of attempts gave up
   *  after 100 s at the server's Retry-After of 5 s. */
  const RESUME_GIVE_UP_MS = 10 * 60 * 1000;
  /** The most one gap between two looks at the refusals counts (`refusedFor`): the page's
   *  longest wait is 30 s, so a longer gap is a machine that slept (its timers paused) or
   *  a clock set forward, not minutes of refusals. */
  const REFUSAL_GAP_MAX_MS = 60 * 1000;

  /** How long `run` has been refused in a row, as the page lived it: each gap since the
   *  last look counts at most REFUSAL_GAP_MAX_MS, never less than 0. `Date.now()` alone
   *  gave up a run at the first ask after a laptop woke (asleep ten minutes, its network
   *  not back yet: "no answer"), and waited on for as long as a clock set back. */
  function refusedFor(run) {
    const now = Date.now();
    run.refusedMs += Math.min(REFUSAL_GAP_MAX_MS, Math.max(0, now - run.lookedAt));
    run.lookedAt = now;
    return run.refusedMs;
  }

  /** The browser gives a stream up for good when a reconnect is answered with anything but
   *  200 - also the 503 (`storage_unavailable`, `shutting_down`, with `Retry-After`) that
   *  a replica answers while its database is away or it restarts, though the run goes on
   *  (a run let go in an outage is carried on once the database is back, and its events
   *  are stored). So ask the stream's URL what it says now: a 503 or 502/504, or no answer
   *  at all, is waited out and the stream opened again after the last event shown; any
   *  other refusal (the run gone, its link expired) ends the attempt with its reason. */
  async function resumeLater(run, url) {
    run.es.close();
    if (run.done) return;
    if (run.refusals === 0) {
      run.refusedMs = 0;
      run.lookedAt = Date.now();
    }
    run.refusals += 1; // back to 0 once a stream opens
    const next = run.lastSeq > 0 ? withParam(url, "after", String(run.lastSeq)) : url;
    const asking = new AbortController();
    let response = null;
    try {
      response = await fetch(next, {
        headers: { Accept: "text/event-stream", ...authHeaders() },
        signal: asking.signal,
      });
    } catch {
      response = null;
    }
    if (run.done) {
      asking.abort();
      return;
    }
    if (response && response.status === 200) {
      asking.abort(); // the stream answers again: follow it with EventSource
      listen(run, next, { replay: false });
      return;
    }
    const transient = !response || [502, 503, 504].includes(response.status);
    if (!transient) {
      giveUp(run, await problemText(response));
      return;
    }
    const asked = Number(response && response.headers.get("Retry-After"));
    waitToResume(run, url, Number.isFinite(asked) && asked > 0 ? asked : null, response ? `HTTP ${response.status}` : "no answer");
  }

  /** Ask the stream again after `retryAfter` seconds (the server's), else 1 s doubling per
   *  refused attempt to 30 s; once refused for RESUME_GIVE_UP_MS in a row, give up. */
  function waitToResume(run, url, retryAfter, why) {
    if (run.done) return;
    if (refusedFor(run) >= RESUME_GIVE_UP_MS) {
      giveUp(run, why);
      return;
    }
    const wait = Math.min(30, retryAfter ?? 2 ** (run.refusals - 1));
    setConn(`reconnecting in ${wait} s (${why})…`);
    setTimeout(() => resumeLater(run, url), wait * 1000);
  }

  function giveUp(run, why) {
    setConn("disconnected");
    addError(run.view, `The stream could not be opened or resumed — ${why} (the run may be gone, or its link expired).`);
    finish(run, "unknown");
  }

  function finish(run, status) {
    if (run.done) return;
    run.done = true;
    run.es.close();
    fillToolReasons(run).catch(() => {});
    if (status === "unknown") setRunStatus(run.view, "unknown", "status unknown");
    const stored = readStored(STORE_RUN);
    if (stored && stored.run_id === run.info.run_id) {
      sessionStorage.setItem(STORE_RUN, JSON.stringify({ ...stored, finished: true }));
    }
    if (current === run) {
      setBusy(false);
      setConn("idle");
    }
  }

  const HINTS = {
    provider_unreachable: " — the model could not be reached; check /readyz.",
    provider_timeout: " — the model took too long to answer.",
    provider_rate_limited: " — the model's provider is rate limiting; try again shortly.",
    max_loops: " — the agent used up its steps before answering.",
    storage_unavailable: " — the server could not store the run's progress.",
  };

  function hintFor(code) {
    return HINTS[code] || "";
  }

  function setToolReason(item, reason, pending) {
    let node = item.querySelector(".tool-reason");
    if (!node) {
      node = el("span", "tool-reason");
      item.append(node);
    }
    node.dataset.pending = pending ? "true" : "false";
    node.textContent = pending ? "" : `— ${reason}`;
  }

  /** What a call returned, in one muted line under it (the event's `summary`: text,
   *  never markup). A line too long for the width is cut with "…"; a click or Enter
   *  shows it whole. */
  function setToolSummary(item, summary) {
    let node = item.querySelector(".tool-summary");
    if (!node) {
      node = el("span", "tool-summary");
      node.tabIndex = 0;
      node.setAttribute("role", "button");
      node.setAttribute("aria-expanded", "false");
      const toggle = () => {
        const open = node.getAttribute("aria-expanded") !== "true";
        node.setAttribute("aria-expanded", String(open));
      };
      node.addEventListener("click", toggle);
      node.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          toggle();
        }
      });
      item.append(node);
    }
    node.textContent = summary;
    node.title = summary;
  }

  /** Fill in the reasons of failed tools from the conversation's stored tool results. */
  async function fillToolReasons(run) {
    const items = [...run.view.tools.querySelectorAll('.tool-reason[data-pending="true"]')];
    if (!items.length || !run.info.conversation_id) return;
    const conversation = await fetchConversation(run.info.conversation_id);
    const results = new Map();
    for (const m of conversation ? conversation.messages : []) {
      for (const r of Array.isArray(m.tool_results) ? m.tool_results : []) results.set(r.tool_call_id, r);
    }
    for (const node of items) {
      const item = node.closest("li");
      const result = results.get(item.dataset.toolUseId);
      setToolReason(item, result ? reasonOf(result.content) || "failed" : "failed (no reason recorded)", false);
    }
  }

  // --- actions ---------------------------------------------------------------------------

  function contextType() {
    const checked = ui.form.querySelector('input[name="context_type"]:checked');
    return checked ? checked.value : "workflow";
  }

  /** Check a context's radio; its example context replaces an untouched one. */
  function pickContext(type) {
    const radio = ui.form.querySelector(`input[name="context_type"][value="${CSS.escape(type)}"]`);
    if (!radio) return;
    radio.checked = true;
    const value = ui.context.value.trim();
    if (!value || Object.values(CONTEXT_EXAMPLES).includes(value)) ui.context.value = CONTEXT_EXAMPLES[type];
    showQuestionExample();
  }

  function showQuestionExample() {
    ui.message.placeholder = QUESTION_EXAMPLES[contextType()] || "";
  }

  async function problemText(response) {
    const body = await response.json().catch(() => null);
    const detail = body && (body.detail || body.error);
    if (response.status === 401) return signInText(detail);
    const retry = response.headers.get("Retry-After");
    return `HTTP ${response.status}${detail ? `: ${detail}` : ""}${retry ? ` (retry in ${retry} s)` : ""}`;
  }

  /** A 401 says where the token goes (the server's words alone, "missing Authorization
   *  header", do not): the Settings field below the buttons. */
  function signInText(detail) {
    const refused = detail ? ` (the server said: ${detail})` : "";
    return ui.token.value.trim()
      ? `the bearer token in Settings → “Bearer token” was refused${refused}: paste a valid one there.`
      : `this server needs a bearer token (AGENT_AUTH=jwt): paste yours in Settings → “Bearer token”, below.`;
  }

  /** Open Settings and put the cursor in the token field. */
  function showTokenField() {
    const settings = ui.token.closest("details");
    if (settings) settings.open = true;
    ui.token.focus();
  }

  async function ask(message) {
    ui.formError.textContent = "";
    ui.contextError.textContent = "";
    if (current && !current.done) {
      ui.formError.textContent = "Wait for the current answer to finish, or stop it.";
      return;
    }
    const text = message.trim();
    if (!text) {
      ui.formError.textContent = "Type a question first.";
      ui.message.focus();
      return;
    }
    const context = parse(ui.context.value.trim() || "{}");
    if (context === null || typeof context !== "object" || Array.isArray(context)) {
      ui.contextError.textContent = "The context must be a JSON object, for example {}.";
      ui.context.focus();
      return;
    }
    saveContext();
    const body = { message: text, context_type: contextType(), context };
    const conversation = sessionStorage.getItem(STORE_CONVERSATION);
    if (conversation) body.conversation_id = conversation;

    ui.send.disabled = true;
    let response;
    try {
      response = await fetch("/v1/agent/runs", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json", ...authHeaders() },
        body: JSON.stringify(body),
      });
    } catch (err) {
      ui.formError.textContent = `Could not reach the server: ${err}`;
      ui.send.disabled = false;
      return;
    }
    if (response.status !== 201) {
      ui.formError.textContent = `The run was not started — ${await problemText(response)}`;
      ui.send.disabled = false;
      if (response.status === 401) showTokenField();
      return;
    }
    const created = await response.json();
    const info = {
      run_id: created.run_id,
      conversation_id: created.conversation_id,
      stream_url: created.stream_url,
      question: text,
    };
    sessionStorage.setItem(STORE_RUN, JSON.stringify(info));
    sessionStorage.setItem(STORE_CONVERSATION, created.conversation_id);
    showConversation();
    ui.message.value = "";
    follow(info, { replay: false });
  }

  async function stop() {
    const run = current;
    if (!run || run.done) return;
    ui.stop.disabled = true;
    setRunStatus(run.view, "running", "stopping…");
    let response;
    try {
      response = await fetch(`/v1/agent/runs/${encodeURIComponent(run.info.run_id)}/cancel`, {
        method: "POST",
        headers: { Accept: "application/json", ...authHeaders() },
      });
    } catch (err) {
      addError(run.view, `Could not reach the server to stop the run: ${err}`);
      ui.stop.disabled = run.done;
      return;
    }
    if (!response.ok) {
      addError(run.view, `Stopping failed — ${await problemText(response)}`);
      ui.stop.disabled = run.done;
      return;
    }
    if (run.waiting) {
      // Its stream had ended at approval_required: read the ending.
      run.waiting = false;
      settleApprovals(run.view, "Stopped — the call was not run.");
      listen(run, withParam(run.info.stream_url, "after", String(run.lastSeq)), { replay: false });
    }
    // The stream itself delivers message_complete with status "cancelled".
  }

  // --- attachments: files of this conversation, searched by its questions -------------------

  /** The conversation's id, made here when there is none yet: an upload creates it on the
   *  server, and the next question goes to it. */
  function ensureConversation() {
    let id = sessionStorage.getItem(STORE_CONVERSATION);
    if (!id) {
      const bytes = crypto.getRandomValues(new Uint8Array(12));
      id = "c-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      sessionStorage.setItem(STORE_CONVERSATION, id);
      showConversation();
    }
    return id;
  }

  function attachmentsUrl(id) {
    return `/v1/agent/conversations/${encodeURIComponent(id)}/attachments`;
  }

  function sizeText(bytes) {
    if (bytes >= 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
    if (bytes >= 1024) return `${Math.round(bytes / 1024)} KB`;
    return `${bytes} B`;
  }

  function showChips(attachments) {
    ui.chips.replaceChildren();
    for (const a of attachments) {
      const remove = el("button", "chip-remove", "×");
      remove.type = "button";
      remove.title = `Remove ${a.filename}`;
      remove.setAttribute("aria-label", `Remove ${a.filename}`);
      remove.addEventListener("click", () => removeAttachment(a));
      const chip = el("li", "chip", el("span", "chip-name", a.filename), el("span", "chip-size", sizeText(a.size)), remove);
      chip.dataset.id = a.id;
      chip.title = `${a.media_type}, ${a.chunks} passage(s): searched by this conversation's questions`;
      ui.chips.append(chip);
    }
  }

  async function loadAttachments() {
    const id = sessionStorage.getItem(STORE_CONVERSATION);
    if (!id) return showChips([]);
    try {
      const response = await fetch(attachmentsUrl(id), { headers: { Accept: "application/json", ...authHeaders() } });
      showChips(response.ok ? (await response.json()).attachments : []);
    } catch (err) {
      ui.attachNote.textContent = `Could not list the attachments: ${err}`;
    }
  }

  async function uploadFiles(files) {
    for (const file of files) {
      const id = ensureConversation();
      const form = new FormData();
      form.append("file", file, file.name);
      ui.attachNote.textContent = `Reading ${file.name}…`;
      let response;
      try {
        response = await fetch(attachmentsUrl(id), {
          method: "POST",
          headers: { Accept: "application/json", ...authHeaders() },
          body: form,
        });
      } catch (err) {
        ui.attachNote.textContent = `Could not reach the server: ${err}`;
        continue;
      }
      ui.attachNote.textContent =
        response.status === 201 ? `${file.name} attached` : `${file.name} not attached — ${await problemText(response)}`;
    }
    await loadAttachments();
  }

  async function removeAttachment(a) {
    const id = sessionStorage.getItem(STORE_CONVERSATION);
    if (!id) return;
    const response = await fetch(`${attachmentsUrl(id)}/${encodeURIComponent(a.id)}`, {
      method: "DELETE",
      headers: authHeaders(),
    });
    ui.attachNote.textContent = response.ok ? `${a.filename} removed` : `Not removed — ${await problemText(response)}`;
    await loadAttachments();
  }

  function newConversation() {
    if (current && !current.done) {
      ui.formError.textContent = "Stop the current answer before starting a new conversation.";
      return;
    }
    sessionStorage.removeItem(STORE_RUN);
    sessionStorage.removeItem(STORE_CONVERSATION);
    sessionStorage.removeItem(STORE_DECISIONS);
    for (const node of ui.transcript.querySelectorAll(".run")) node.remove();
    ui.empty.hidden = false;
    current = null;
    showConversation();
    showChips([]);
    ui.attachNote.textContent = "";
    ui.message.focus();
  }

  // --- the conversation so far and the provider ------------------------------------------

  async function fetchConversation(id) {
    const response = await fetch(`/v1/agent/conversations/${encodeURIComponent(id)}`, {
      headers: { Accept: "application/json", ...authHeaders() },
    });
    if (!response.ok) return null;
    const body = await response.json().catch(() => null);
    return body && Array.isArray(body.messages) ? body : null;
  }

  /** Turns of a stored conversation: {question, answer, sources, failures}. */
  function turnsOf(messages) {
    const turns = [];
    let turn = null;
    for (const m of messages) {
      if (!m || typeof m !== "object") continue;
      const results = Array.isArray(m.tool_results) ? m.tool_results : [];
      if (m.role === "user" && !results.length && m.content) {
        turn = { question: asText(m.content), text: "", answer: null, sources: [], failures: [] };
        turns.push(turn);
        continue;
      }
      if (!turn) continue;
      if (m.role === "assistant") {
        if (m.content) turn.text += (turn.text ? "\n\n" : "") + asText(m.content);
        for (const call of Array.isArray(m.tool_calls) ? m.tool_calls : []) {
          const args = call && call.arguments;
          if (call.name === "generate_response" && args && typeof args.answer === "string") {
            turn.answer = args.answer;
            turn.answerCall = call.id;
            turn.sources = (Array.isArray(args.sources) ? args.sources : []).map((id) =>
              typeof id === "object" && id ? id : { id: asText(id), title: asText(id).split("#")[0] });
          }
        }
      }
      for (const r of results) {
        if (r && r.is_error) turn.failures.push({ name: asText(r.name), reason: reasonOf(r.content) });
        // The answer's stored result names its sources as the live `response` showed
        // them (title, file, link): the cards read the same after a reload.
        if (r && !r.is_error && r.tool_call_id === turn.answerCall) {
          const delivered = parse(asText(r.content));
          const cards = delivered && Array.isArray(delivered.sources) ? delivered.sources : [];
          if (cards.length && cards.every((c) => c && typeof c === "object" && c.id)) turn.sources = cards;
        }
      }
    }
    return turns;
  }

  function renderPastTurn(turn, index) {
    const node = ui.template.content.firstElementChild.cloneNode(true);
    node.classList.add("past");
    node.dataset.runId = `past-${index}`;
    node.dataset.status = "completed";
    node.querySelector(".question").textContent = turn.question;
    node.querySelector(".run-meta").remove();
    const view = {
      root: node,
      answer: node.querySelector(".answer"),
      final: node.querySelector(".final"),
      tools: node.querySelector(".tools"),
    };
    for (const f of turn.failures) {
      const item = el("li", "tool", el("span", "tool-name", f.name), el("span", "tool-state", "failed"));
      item.dataset.state = "error";
      setToolReason(item, f.reason || "failed", false);
      view.tools.append(item);
    }
    const answer = turn.answer ?? turn.text;
    if (answer) {
      renderAnswer(view, answer, turn.sources);
      view.final.hidden = !turn.sources.length;
    } else {
      view.answer.append(el("p", "hint", "(no answer was recorded)"));
    }
    ui.history.append(node);
    ui.empty.hidden = true;
  }

  /** Render the stored turns; skip the last one when it is the run about to be replayed. */
  async function restoreConversation(skipQuestion) {
    const id = sessionStorage.getItem(STORE_CONVERSATION);
    if (!id) return [];
    let conversation = null;
    try {
      conversation = await fetchConversation(id);
    } catch {
      conversation = null;
    }
    if (!conversation) return [];
    const turns = turnsOf(conversation.messages);
    let skipped = [];
    if (skipQuestion && turns.length && turns[turns.length - 1].question === skipQuestion) skipped = turns.splice(-1);
    ui.history.replaceChildren();
    turns.forEach(renderPastTurn);
    return skipped;
  }

  async function showProvider() {
    let report = null;
    try {
      const response = await fetch("/readyz", { headers: { Accept: "application/json" } });
      report = await response.json();
    } catch {
      report = null;
    }
    const p = report && report.checks && report.checks.provider;
    if (!p || typeof p !== "object") {
      ui.provider.textContent = "unknown";
      return;
    }
    const name = asText(p.name) || "unknown";
    ui.provider.textContent = p.model ? `${name} · ${asText(p.model)}` : name;
    ui.provider.title = [p.chosen_because, p.detail].filter(Boolean).map(asText).join(" — ");
    ui.provider.dataset.ok = p.ok ? "true" : "false";
    if (name === "extractive") {
      ui.offline.hidden = false;
      const why = ui.offline.querySelector(".why");
      why.textContent = p.chosen_because ? `Why offline: ${asText(p.chosen_because)}` : "";
      why.hidden = !p.chosen_because;
      // Offline only knowledge questions can be answered: open there, unless a context
      // was already chosen (restored from this tab, or picked while /readyz answered).
      if (!contextChosen) pickContext("knowledge");
    }
  }

  function saveContext() {
    sessionStorage.setItem(STORE_CONTEXT, JSON.stringify({ type: contextType(), context: ui.context.value }));
  }

  function restoreContext() {
    const saved = readStored(STORE_CONTEXT);
    if (!saved || typeof saved !== "object") return;
    const radio = ui.form.querySelector(`input[name="context_type"][value="${CSS.escape(asText(saved.type))}"]`);
    if (radio) {
      radio.checked = true;
      contextChosen = true;
    }
    if (typeof saved.context === "string") ui.context.value = saved.context;
  }

  // --- start-up --------------------------------------------------------------------------

  ui.form.addEventListener("submit", (e) => {
    e.preventDefault();
    ask(ui.message.value);
  });
  ui.message.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      ask(ui.message.value);
    }
  });
  ui.stop.addEventListener("click", stop);
  ui.attach.addEventListener("click", () => ui.attachFile.click());
  ui.attachFile.addEventListener("change", () => {
    const files = [...ui.attachFile.files];
    ui.attachFile.value = "";
    uploadFiles(files);
  });
  // A file dropped anywhere on the composer is attached to the conversation.
  ui.form.addEventListener("dragover", (e) => {
    if (![...e.dataTransfer.types].includes("Files")) return;
    e.preventDefault();
    ui.form.classList.add("dropping");
  });
  ui.form.addEventListener("dragleave", () => ui.form.classList.remove("dropping"));
  ui.form.addEventListener("drop", (e) => {
    if (!e.dataTransfer.files.length) return;
    e.preventDefault();
    ui.form.classList.remove("dropping");
    uploadFiles([...e.dataTransfer.files]);
  });
  ui.newConversation.addEventListener("click", newConversation);
  ui.token.value = sessionStorage.getItem(STORE_TOKEN) || "";
  ui.token.addEventListener("change", () => {
    const token = ui.token.value.trim();
    if (token) sessionStorage.setItem(STORE_TOKEN, token);
    else sessionStorage.removeItem(STORE_TOKEN);
  });
  for (const radio of ui.form.querySelectorAll('input[name="context_type"]')) {
    radio.addEventListener("change", () => {
      contextChosen = true;
      pickContext(radio.value);
      saveContext();
    });
  }
  ui.context.addEventListener("change", saveContext);

  restoreContext();
  showQuestionExample();
  showConversation();
  loadAttachments();
  showProvider();
  const stored = readStored(STORE_RUN);
  if (stored && stored.run_id && stored.stream_url) {
    // Earlier turns from the conversation; the last run replayed from its whole log
    // (then followed live), or from the conversation when its link has expired.
    const skipped = restoreConversation(stored.question);
    follow(stored, {
      replay: true,
      onReplayFailed: async () => {
        for (const turn of await skipped) renderPastTurn(turn, ui.history.childElementCount);
      },
    });
  } else {
    restoreConversation(null);
  }
})();
