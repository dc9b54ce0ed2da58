// Loaded before the ipywidgets embed script (nb_ipywidgets_js in _config.yml),
// on pages that show widgets. It keeps the widgets working offline and with
// MathJax 3:
// 1. RequireJS and the embed bundle resolve their own files (widget fonts)
//    next to embed-amd.js in _static/vendor/html-manager/, not relative to the
//    page or on a CDN.
// 2. The embed bundle typesets widget labels with MathJax 2's MathJax.Hub.Queue;
//    MathJax 3 has no Hub, so a small adapter forwards to typesetPromise.
(function () {
  "use strict";
  var here = document.currentScript && document.currentScript.src;
  if (!here) {
    return;
  }
  var managerDir = new URL("vendor/html-manager/", here).href;
  window.__jupyter_widgets_assets_path__ = managerDir;
  if (window.require && window.require.config) {
    // Each module of the bundle finds its fonts next to its own URL, which RequireJS derives
    // from the module's name: without these paths, "@jupyter-widgets/base" resolves next to
    // the page, and the fonts of its icons are fetched from there (and are not found).
    var paths = { "@jupyter-widgets/html-manager/dist": managerDir.replace(/\/$/, "") };
    ["base", "controls", "base7", "controls7", "html-manager"].forEach(function (name) {
      paths["@jupyter-widgets/" + name] = managerDir + name;
    });
    window.require.config({ paths: paths });
  }

  function addHubAdapter() {
    var mj = window.MathJax;
    if (!mj || !mj.version || mj.Hub) {
      return;
    }
    mj.Hub = {
      Queue: function () {
        var elements = [];
        for (var i = 0; i < arguments.length; i++) {
          var job = arguments[i];
          if (Array.isArray(job) && job[0] === "Typeset" && job[2]) {
            elements.push(job[2]);
          }
        }
        var ready = mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
        return ready.then(function () {
          return mj.typesetPromise ? mj.typesetPromise(elements) : null;
        });
      },
    };
  }
  // MathJax is loaded with `defer`: it exists once the document is parsed.
  document.addEventListener("DOMContentLoaded", addHubAdapter);
})();
