// Loaded before the ipywidgets embed script (nb_ipywidgets_js in _config.yml),
// on pages that show widgets. It keeps the widgets working offline and with
// MathJax 3:
// 1. RequireJS and the embed bundle resolve their own files (widget fonts)
//    next to embed-amd.js in _static/vendor/html-manager/, not relative to the
//    page or on a CDN.
// 2. The embed bundle typesets widget labels with MathJax 2's MathJax.Hub.Queue;
//    MathJax 3 has no Hub, so a small adapter forwards to typesetPromise.
// 3. The precomputed explorers (aiayn.figures.views) read right to a screen reader: each
//    control is named by its label, each view's image has its caption as alt text, and a
//    live region says what the view now shown shows whenever a control moves it
//    (tests/test_html.py audits the pages with axe-core and reads the live region).
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

  function setIfChanged(element, name, value) {
    if (value && element.getAttribute(name) !== value) {
      element.setAttribute(name, value);
    }
  }

  // Each control's label names it: noUiSlider's handle (role="slider") has no name of its own,
  // and a toggle group's buttons say only "on" or "off".
  function nameControls(box) {
    box.querySelectorAll(".aiayn-control").forEach(function (control) {
      var label = control.querySelector(".widget-label");
      var name = label ? label.textContent.trim() : "";
      var readout = control.querySelector(".widget-readout");
      control.querySelectorAll('[role="slider"]').forEach(function (handle) {
        setIfChanged(handle, "aria-label", name);
        if (readout) {
          setIfChanged(handle, "aria-valuetext", readout.textContent.trim());
        }
      });
      control.querySelectorAll("select").forEach(function (select) {
        setIfChanged(select, "aria-label", name);
      });
      var buttons = control.querySelector(".widget-toggle-buttons > div, .widget-toggle-buttons");
      if (buttons && buttons.querySelector("button")) {
        setIfChanged(buttons, "role", "group");
        setIfChanged(buttons, "aria-label", name);
        buttons.querySelectorAll("button").forEach(function (button) {
          var pressed = button.classList.contains("mod-active") ? "true" : "false";
          setIfChanged(button, "aria-pressed", pressed);
        });
      }
    });
  }

  // Each view: its image's alt text is its caption; the live region repeats the caption of
  // the one view on screen, so that moving a control is heard as well as seen.
  function describeViews(box) {
    var shown = "";
    box.querySelectorAll(".aiayn-view").forEach(function (caption) {
      var view = caption.closest(".widget-vbox") || caption.parentElement;
      var text = caption.textContent.trim();
      view.querySelectorAll("img").forEach(function (img) {
        setIfChanged(img, "alt", text);
      });
      if (caption.offsetParent !== null) {
        shown = text;
      }
    });
    var live = box.querySelector(":scope > .aiayn-live");
    if (!live) {
      live = document.createElement("p");
      live.className = "aiayn-live aiayn-sr-only";
      live.setAttribute("aria-live", "polite");
      box.appendChild(live);
    }
    if (shown && live.textContent !== shown) {
      live.textContent = shown;
    }
  }

  var pending = false;
  function describeExplorers() {
    pending = false;
    document.querySelectorAll(".aiayn-static-explorer").forEach(function (box) {
      nameControls(box);
      describeViews(box);
    });
  }
  // The widget manager renders the explorers after the page has loaded, and a control switches
  // views by changing classes: every change schedules one pass. A pass's own changes (the live
  // region added or its text set) schedule one more, which finds nothing to change.
  function schedule() {
    if (!pending) {
      pending = true;
      window.requestAnimationFrame(describeExplorers);
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    new MutationObserver(schedule).observe(document.body, {
      childList: true, subtree: true, attributes: true, attributeFilter: ["class", "style"],
    });
    schedule();
  });
})();
