/* SPDX-License-Identifier: BSD-3-Clause */
/* CRC-32C (Castagnoli), as used by iSCSI, ext4 and btrfs metadata. */

#ifndef REPLICATE_CRC32C_H
#define REPLICATE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC-32C over buf.  Start with crc = 0; the result of
 * crc32c (0, "123456789", 9) is 0xe3069283.
 */
extern uint32_t crc32c (uint32_t crc, const void *buf, size_t len);

#endif /* REPLICATE_CRC32C_H */
