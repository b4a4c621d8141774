#!/bin/sh
# The baton package's postremove (deb: postrm remove|purge|upgrade|...; rpm: %postun 0|1).
# It has systemd forget the unit. It keeps the baton user and /var/lib/baton, even on
# purge: they hold the device's keys and its copy of the chain.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
case "$1" in
remove | 0)
	if [ -e /var/lib/baton ]; then
		echo "baton: kept /var/lib/baton (this device's keys and data) and the baton user; remove them by hand when no longer wanted"
	fi
	;;
esac
exit 0
