"""JupyterLab's server settings for this project's notebooks (the set-up copies this file into the
virtual environment's ``etc/jupyter/``).

After a notebook is saved in a git checkout, git may list it as modified although nothing would be
committed: nbstripout's filter strips the outputs the save wrote, but git skips the filter when a
file's size differs from its record, so ``git status`` says modified and ``git switch`` refuses.
The hook below asks git whether the saved notebook's committed content changed (``git diff``
runs the filter); when it did not, ``git add`` refreshes git's record of the file (it stages
nothing: the filtered content is the index's). A real change, or an untracked file, is left alone.
"""

import os
import subprocess


def refresh_git_record(model, os_path, contents_manager, **kwargs):
    """``post_save_hook``: refresh git's record of a saved, tracked notebook whose committed
    content did not change; never raises (a save must not fail because of git)."""
    if model.get("type") != "notebook":
        return
    folder = os.path.dirname(os_path)

    def git(*args):
        return subprocess.run(["git", *args, "--", os_path], cwd=folder, capture_output=True,
                              timeout=30).returncode

    try:
        if git("ls-files", "--error-unmatch") == 0 and git("diff", "--quiet") == 0:
            git("add")
    except (OSError, subprocess.SubprocessError):
        pass


c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)
c.FileContentsManager.post_save_hook = refresh_git_record
