"""Where an upstream path lives in each target: an upstream checkout or an installed package.

Pure path arithmetic. An upstream checkout keeps the package under ``python/sglang/``; an
installed distribution puts the same files at ``site-packages/sglang/``. Files outside the
package (``test/registered/...``) have no place in site-packages. Not for deciding what a
target *is* on disk: that probing lives with the apply verb.
"""

UPSTREAM_PACKAGE = "python/sglang/"
# 'a/' + 'python/' + 'sglang/': what git apply strips to get a package-relative path.
PACKAGE_STRIP = 3
COMPILED_SUFFIXES = (".so", ".pyd", ".dylib")


def package_relative(upstream_path: str):
    """``python/sglang/srt/x.py`` -> ``srt/x.py``; None for paths outside the package."""
    if upstream_path.startswith(UPSTREAM_PACKAGE) and len(upstream_path) > len(UPSTREAM_PACKAGE):
        return upstream_path[len(UPSTREAM_PACKAGE) :]
    return None


def installed_path(upstream_path: str):
    """``python/sglang/srt/x.py`` -> ``sglang/srt/x.py`` (relative to site-packages), or None."""
    relative = package_relative(upstream_path)
    return None if relative is None else "sglang/" + relative


def wheel_member_to_upstream(member: str):
    """A wheel member's upstream path, or None for what upstream does not track (dist-info,
    compiled extensions: upstream builds those, it does not commit them)."""
    if not member.startswith("sglang/") or member.endswith("/"):
        return None
    if member.endswith(COMPILED_SUFFIXES):
        return None
    return "python/" + member
