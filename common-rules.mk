# SPDX-License-Identifier: BSD-3-Clause
# Included by every Makefile.am: flags every target shares.

NULL =

AM_CPPFLAGS = \
	-I$(top_srcdir)/common/utils \
	-I$(top_srcdir)/common/mdformat \
	-I$(top_srcdir)/common/replication \
	$(NULL)

AM_CFLAGS = \
	$(WARNINGS_CFLAGS) \
	$(SANITIZER_CFLAGS) \
	$(PTHREAD_CFLAGS) \
	$(NULL)

AM_LDFLAGS = $(SANITIZER_CFLAGS)
