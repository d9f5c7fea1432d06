"""The files app: a flat map from absolute paths ("/notes/todo.txt") to text content."""

from __future__ import annotations

from typing import Any

from coevolve.envs.toolworld.apps.base import App, ToolError, check_text, lookup, shown


def check_path(path: str) -> str:
    """An absolute file path without empty or '..' parts."""
    parts = path.split("/")
    if not path.startswith("/") or len(path) > 200 or any(p in ("", "..", ".") for p in parts[1:]):
        raise ToolError(f"path must look like /folder/name.txt, got {shown(path)}")
    return path


class FilesApp(App):
    """Text files by path."""

    name = "files"
    TOOLS = (
        "list_files",
        "read_file",
        "write_file",
        "append_to_file",
        "delete_file",
        "move_file",
        "search_files",
    )

    @classmethod
    def empty_state(cls) -> dict[str, Any]:
        return {"files": {}}

    @property
    def _files(self) -> dict[str, str]:
        return self.state["files"]

    def list_files(self, folder: str = "/") -> list[str]:
        """List the paths of the files in a folder.

        Args:
            folder: Folder to list, e.g. "/notes"; "/" lists every file.
        """
        prefix = folder.rstrip("/") + "/"
        return sorted(path for path in self._files if path.startswith(prefix))

    def read_file(self, path: str) -> dict[str, Any]:
        """Read the text content of a file.

        Args:
            path: Full path of the file, e.g. "/notes/todo.txt".
        """
        return {"path": path, "content": lookup(self._files, path, "file")}

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        """Create a file with the given content, or replace the content of an existing file.

        Args:
            path: Full path of the file, e.g. "/notes/todo.txt".
            content: The text to store in the file.
        """
        self._files[check_path(path)] = check_text(content, "content")
        return {"path": path, "saved": True}

    def append_to_file(self, path: str, text: str) -> dict[str, Any]:
        """Add a new line of text at the end of an existing file.

        Args:
            path: Full path of the file.
            text: The line to add.
        """
        current = lookup(self._files, path, "file")
        self._files[path] = current + "\n" + check_text(text, "text")
        return {"path": path, "saved": True}

    def delete_file(self, path: str) -> dict[str, Any]:
        """Delete a file.

        Args:
            path: Full path of the file to delete.
        """
        lookup(self._files, path, "file")
        del self._files[path]
        return {"path": path, "deleted": True}

    def move_file(self, source: str, destination: str) -> dict[str, Any]:
        """Move or rename a file.

        Args:
            source: Current full path of the file.
            destination: New full path; no file may exist there yet.
        """
        content = lookup(self._files, source, "file")
        if destination in self._files:
            raise ToolError(f"a file already exists at {shown(destination)}")
        self._files[check_path(destination)] = content
        del self._files[source]
        return {"source": source, "destination": destination, "moved": True}

    def search_files(self, text: str) -> list[str]:
        """Find the files whose content contains a text (case-insensitive).

        Args:
            text: The text to look for.
        """
        needle = check_text(text, "text").lower()
        return sorted(path for path, content in self._files.items() if needle in content.lower())
