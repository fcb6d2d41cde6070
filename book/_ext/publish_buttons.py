"""One setting publishes the site's buttons: `repository.url` in _config.yml.

The theme's repository, issue and edit buttons, and the launch buttons that open
a chapter on Binder or Colab, all need the repository's public URL: without it
Jupyter Book refuses to build ("you must specify the repository URL") or the
theme fails on the launch buttons. So _config.yml names the hubs but leaves the
repository buttons off, and this extension turns the buttons on once
`repository.url` is set, and empties the hubs while it is not, so that the one
line
    repository:
      url: https://github.com/OWNER/REPO
publishes the course with every button, and an unpublished checkout builds
without them. Loaded through `sphinx: local_extensions` in _config.yml.
"""

from __future__ import annotations

BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button")
HUBS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url")


def buttons_need_a_repository(app, config) -> None:
    options = config.html_theme_options
    published = bool(options.get("repository_url"))
    for button in BUTTONS:
        options[button] = published
    if not published:
        launch = options.get("launch_buttons") or {}
        for hub in HUBS:
            if hub in launch:
                launch[hub] = ""


def setup(app):
    app.connect("config-inited", buttons_need_a_repository)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
