// Which of an answer's sources are one document (one source card): the rule of
// events/source_key.py's document_key, here because the browser cannot import Python.
// tests/test_source_key.py runs both on the same sources: they must agree.
"use strict";

(() => {
  /** A web answer's stored id (`px_` and 16 hex digits); its pages are `<id>#<n>`. */
  const WEB_ANSWER = /^px_[0-9a-f]{16}$/;

  /** The key a source shares with the others of its document: a web answer is itself
   *  (its link is only its first page's); else its link; else its knowledge-base
   *  document (`docId`, else the id before `#`, but a web answer's page `px_…#2` is its
   *  own); else the id. `url` is the link the page will show (http or https), or empty. */
  function documentKey(id, url, docId) {
    if (WEB_ANSWER.test(id)) return id;
    if (url) return url;
    if (docId) return docId;
    const cut = id.indexOf("#");
    if (cut < 0) return id;
    const doc = id.slice(0, cut);
    return WEB_ANSWER.test(doc) ? id : doc;
  }

  globalThis.AgentSourceKey = Object.freeze({ documentKey });
})();
