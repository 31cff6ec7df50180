/*
 * hefprobe_shim.h - a narrow C ABI over HailoRT 5.x's C++ InferModel API.
 *
 * Why a shim: on Hailo-10H the VDevice is an RPC client whose configure() returns
 * HAILO_NOT_IMPLEMENTED (libhailort/src/vdevice/vdevice_hrpc_client.cpp), so HailoRT's C API
 * (hailo_configure_vdevice, vstreams) cannot run a network there. Only the C++ InferModel API
 * can, and Rust cannot call C++ directly.
 *
 * Conventions, for every function that returns int:
 *   - the value is a hailo_status (hailort.h): 0 = HAILO_SUCCESS. Errors detected by the shim
 *     itself use the closest HailoRT status (HAILO_INVALID_ARGUMENT for caller mistakes,
 *     HAILO_INSUFFICIENT_BUFFER for a too small caller buffer, HAILO_OUT_OF_HOST_MEMORY,
 *     HAILO_INTERNAL_FAILURE for an unexpected C++ exception);
 *   - on failure a NUL-terminated message naming the HailoRT call (or the shim check) that
 *     failed is written to err[0..err_len) (truncated to fit; nothing if err is NULL);
 *   - no C++ exception ever crosses this ABI.
 * Handles are opaque; a model keeps its vdevice alive, so handles may be destroyed in any order.
 * Nothing here is thread safe: use one handle from one thread at a time.
 */
#ifndef HEFPROBE_SHIM_H
#define HEFPROBE_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Capacity of the fixed name fields below. HailoRT names fit in HAILO_MAX_STREAM_NAME_SIZE
 * (128 incl. NUL, hailort.h); a longer name is reported as an error, never truncated. */
#define HP_NAME_CAPACITY 256

typedef struct hp_vdevice hp_vdevice;
typedef struct hp_model hp_model;

/* Same layout as hailo_quant_info_t {qp_zp, qp_scale, limvals_min, limvals_max} (hailort.h);
 * the shim static_asserts it. */
typedef struct hp_quant_info {
    float zp;
    float scale;
    float min;
    float max;
} hp_quant_info;

/* One InferModel::InferStream, read after the format types were set. */
typedef struct hp_stream_info {
    char name[HP_NAME_CAPACITY];
    uint32_t height;
    uint32_t width;
    uint32_t features;
    uint32_t format_type;      /* hailo_format_type_t: 0 AUTO, 1 UINT8, 2 UINT16, 3 FLOAT32 */
    uint32_t format_order;     /* hailo_format_order_t */
    uint64_t frame_size;       /* InferStream::get_frame_size(), bytes */
    uint64_t quant_info_count; /* InferStream::get_quant_infos().size() */
} hp_stream_info;

typedef struct hp_vdevice_info {
    /* VDevice::get_physical_devices_ids(), joined by ", " (empty if the query failed). */
    char device_ids[HP_NAME_CAPACITY];
    /* Device::get_architecture() of the first physical device as hailo_device_architecture_t
     * (6 = HAILO_ARCH_HAILO10H), or -1 if it could not be read. */
    int32_t architecture;
} hp_vdevice_info;

/* An input frame, bound by stream name. */
typedef struct hp_input {
    const char *name;
    const uint8_t *data;
    size_t size;
} hp_input;

/* An output frame, in InferModel::outputs() order. */
typedef struct hp_output {
    uint8_t *data;
    size_t size;
} hp_output;

/* VDevice::create_shared(params) with hailo_init_vdevice_params() defaults and device_count 1. */
int hp_vdevice_create(hp_vdevice **out, char *err, size_t err_len);
void hp_vdevice_info_get(const hp_vdevice *vdevice, hp_vdevice_info *out);
void hp_vdevice_destroy(hp_vdevice *vdevice);

/* Hef::create(path) + get_network_groups_names(), written to names as NUL-terminated strings
 * one after another. *needed gets the bytes required; if capacity is smaller, nothing is
 * written and HAILO_INSUFFICIENT_BUFFER is returned (call again with a larger buffer). */
int hp_hef_network_groups(const char *hef_path, char *names, size_t capacity, size_t *needed, char *err,
                          size_t err_len);

/* create_infer_model(MemoryView of the HEF, group) (the MemoryView overload: the only one, with
 * the path one, that works over Hailo-10H's RPC), set_enable_kv_cache(true), FLOAT32 for the
 * named inputs and every output, configure(), create_bindings() with page-aligned staging
 * buffers of each stream's frame size. The HEF file is read once per vdevice into a DMA-able
 * buffer shared by every group created from it. A create/configure failure caused by memory or
 * the RPC deadline (45 s, LONG_RPC_ACTION_TIMEOUT) names the HEF's size and the environment
 * variable HAILO_REQUEST_TIMEOUT_SECONDS, which replaces HailoRT's RPC deadlines. */
int hp_model_create(hp_vdevice *vdevice, const char *hef_path, const char *group,
                    const char *const *float_inputs, size_t float_input_count, hp_model **out, char *err,
                    size_t err_len);
/* Frees the model, except after a run that timed out: then the job may still complete into the
 * staging buffers and HailoRT's callback holds a raw pointer to the configured model, so the
 * model is leaked and a line saying so goes to stderr. */
void hp_model_destroy(hp_model *model);

/* Stream queries: is_output 0 = inputs() order, 1 = outputs() order. */
size_t hp_model_stream_count(const hp_model *model, int is_output);
int hp_model_stream_info(const hp_model *model, int is_output, size_t index, hp_stream_info *out, char *err,
                         size_t err_len);
/* Writes min(capacity, n) quant infos and sets *count = n (n = get_quant_infos().size()). */
int hp_model_stream_quant_infos(const hp_model *model, int is_output, size_t index, hp_quant_info *out,
                                size_t capacity, size_t *count, char *err, size_t err_len);

/* Copies every input (each exactly once, size == its frame size) into the staging buffers,
 * ConfiguredInferModel::run(bindings, timeout), then copies every output into outputs[i]
 * (outputs() order, size == frame size). After any failed run (over RPC, HailoRT shuts the
 * configured model down on the server), or a failed init_cache/update_cache_offset, every later
 * call on the model fails with HAILO_INVALID_OPERATION and a message naming the first failure. */
int hp_model_run(hp_model *model, const hp_input *inputs, size_t input_count, const hp_output *outputs,
                 size_t output_count, uint32_t timeout_ms, char *err, size_t err_len);

int hp_model_init_cache(hp_model *model, uint32_t read_offset, char *err, size_t err_len);
int hp_model_update_cache_offset(hp_model *model, int32_t offset_delta_entries, char *err, size_t err_len);

/* get_cache_buffers() in two steps, so the caller can size its memory: snapshot (one HailoRT
 * call; entries sorted by cache id), then per entry its id and size, then copy. The snapshot is
 * kept until the next snapshot, release or destroy. */
int hp_model_cache_snapshot(hp_model *model, size_t *count, char *err, size_t err_len);
int hp_model_cache_entry(const hp_model *model, size_t index, uint32_t *cache_id, uint64_t *size, char *err,
                         size_t err_len);
int hp_model_cache_copy(const hp_model *model, size_t index, uint8_t *dst, size_t dst_len, char *err,
                        size_t err_len);
void hp_model_cache_release(hp_model *model);

int hp_model_update_cache_buffer(hp_model *model, uint32_t cache_id, const uint8_t *data, size_t size, char *err,
                                 size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* HEFPROBE_SHIM_H */
