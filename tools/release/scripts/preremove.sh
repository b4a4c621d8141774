#!/bin/sh
# The baton package's preremove (deb: prerm remove|upgrade|...; rpm: %preun 0|1).
# On removal (not on an upgrade) it stops and disables the service: its binary and
# unit are about to go. A graceful stop releases the lease to a standby.
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now baton.service >/dev/null 2>&1 || true
	fi
	;;
esac
exit 0
