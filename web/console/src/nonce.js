// The page's Content-Security-Policy allows <style> elements only with this
// response's nonce. xterm.js makes <style> elements of its own (its colours
// and cell sizes), so every <style> created from here on gets the nonce,
// which spaced put on the page's stylesheet link (readable by script only,
// through the nonce property).
const link = document.querySelector("link[nonce]");
const nonce = link ? link.nonce : "";
if (nonce) {
  const create = Document.prototype.createElement;
  Document.prototype.createElement = function (tag, options) {
    const el = create.call(this, tag, options);
    if (typeof tag === "string" && tag.toLowerCase() === "style") el.nonce = nonce;
    return el;
  };
}
