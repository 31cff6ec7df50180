// hefprobe_shim.cpp - implementation of hefprobe_shim.h over HailoRT 5.x (written against the
// public headers of hailo-ai/hailort v5.2.0, hailort/libhailort/include/hailo/*.hpp).
//
// Every exported function catches every exception: the only ones HailoRT itself throws come
// from Expected::expect (expected.hpp), which is not used here, but std::string/std::vector can
// throw std::bad_alloc and unwinding into Rust is undefined behaviour.

#include "hefprobe_shim.h"

#include <hailo/hailort.h>
#include <hailo/buffer.hpp>
#include <hailo/device.hpp>
#include <hailo/expected.hpp>
#include <hailo/hef.hpp>
#include <hailo/infer_model.hpp>
#include <hailo/vdevice.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

static_assert(sizeof(hp_quant_info) == sizeof(hailo_quant_info_t), "hp_quant_info must mirror hailo_quant_info_t");
static_assert(offsetof(hp_quant_info, zp) == offsetof(hailo_quant_info_t, qp_zp), "qp_zp offset");
static_assert(offsetof(hp_quant_info, scale) == offsetof(hailo_quant_info_t, qp_scale), "qp_scale offset");
static_assert(offsetof(hp_quant_info, min) == offsetof(hailo_quant_info_t, limvals_min), "limvals_min offset");
static_assert(offsetof(hp_quant_info, max) == offsetof(hailo_quant_info_t, limvals_max), "limvals_max offset");

namespace {

// ---- error reporting ------------------------------------------------------------------------

// Copies msg into the caller's buffer, truncated and NUL-terminated. Never throws.
void write_err(char *err, size_t err_len, const char *msg) noexcept
{
    if (nullptr == err || 0 == err_len) {
        return;
    }
    std::snprintf(err, err_len, "%s", msg);
}

int fail(char *err, size_t err_len, hailo_status status, const std::string &msg) noexcept
{
    write_err(err, err_len, msg.c_str());
    return static_cast<int>(status);
}

// Runs body, turning any exception into a status and a message (see the file comment).
template <typename F>
int guarded(const char *function, char *err, size_t err_len, F &&body) noexcept
{
    char msg[512];
    try {
        return body();
    } catch (const std::bad_alloc &) {
        std::snprintf(msg, sizeof(msg), "%s: out of host memory (std::bad_alloc)", function);
        write_err(err, err_len, msg);
        return static_cast<int>(HAILO_OUT_OF_HOST_MEMORY);
    } catch (const std::exception &e) {
        std::snprintf(msg, sizeof(msg), "%s: unexpected C++ exception: %s", function, e.what());
        write_err(err, err_len, msg);
        return static_cast<int>(HAILO_INTERNAL_FAILURE);
    } catch (...) {
        std::snprintf(msg, sizeof(msg), "%s: unexpected C++ exception of unknown type", function);
        write_err(err, err_len, msg);
        return static_cast<int>(HAILO_INTERNAL_FAILURE);
    }
}

std::string quoted(const std::string &s)
{
    return "\"" + s + "\"";
}

std::string join(const std::vector<std::string> &items, const char *separator)
{
    std::string out;
    for (const auto &item : items) {
        if (!out.empty()) {
            out += separator;
        }
        out += item;
    }
    return out;
}

// ---- staging buffers ------------------------------------------------------------------------

// Page-aligned anonymous memory, as upstream's async_infer_basic_example allocates inference
// buffers (page_aligned_alloc with mmap): such buffers can be DMA-mapped by the driver.
class PageBuffer final
{
public:
    explicit PageBuffer(size_t size) : m_size(size)
    {
        if (0 == size) {
            return;
        }
        void *addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
        if (MAP_FAILED == addr) {
            throw std::bad_alloc();
        }
        m_data = static_cast<uint8_t *>(addr);
    }
    ~PageBuffer()
    {
        if (nullptr != m_data) {
            munmap(m_data, m_size);
        }
    }
    PageBuffer(PageBuffer &&other) noexcept : m_data(other.m_data), m_size(other.m_size)
    {
        other.m_data = nullptr;
        other.m_size = 0;
    }
    PageBuffer(const PageBuffer &) = delete;
    PageBuffer &operator=(const PageBuffer &) = delete;
    PageBuffer &operator=(PageBuffer &&) = delete;

    uint8_t *data() const { return m_data; }
    size_t size() const { return m_size; }

private:
    uint8_t *m_data = nullptr;
    size_t m_size = 0;
};

// What the caller may ask about one InferModel::InferStream, read once after the format types
// were set (configure() takes the frame sizes at that point too: infer_model_hrpc_client.cpp).
struct Stream {
    std::string name;
    hailo_3d_image_shape_t shape;
    hailo_format_t format;
    size_t frame_size;
    std::vector<hailo_quant_info_t> quant_infos;
    PageBuffer staging;
};

Stream describe_stream(const hailort::InferModel::InferStream &stream)
{
    const size_t frame_size = stream.get_frame_size();
    return Stream{stream.name(), stream.shape(), stream.format(), frame_size, stream.get_quant_infos(),
                  PageBuffer(frame_size)};
}

} // namespace

// ---- handles --------------------------------------------------------------------------------

struct hp_vdevice {
    std::shared_ptr<hailort::VDevice> vdevice;
    hp_vdevice_info info;
    // Each HEF's bytes, read once and shared by every group created from it. The 5.2 public
    // API has no way to share more than that over RPC: every create_infer_model overload
    // VDeviceHrpcClient implements (the path and the MemoryView one, vdevice_hrpc_client.hpp)
    // sends the whole buffer with VDEVICE__CREATE_INFER_MODEL (vdevice_hrpc_client.cpp
    // create_infer_model), and the Hef / shared_ptr<Buffer> overloads are not overridden there,
    // so they would run the local base class on an RPC client. genai shares one Hef because
    // it runs on the server, next to the device (llm_server.cpp). Sharing the host copy is what
    // the client side can do; the device still receives the HEF once per group.
    // The bytes sit in a DMA-able buffer, as the path overload allocates them
    // (vdevice_hrpc_client.cpp 153-167: Buffer::create(size, BufferStorageParams::create_dma())).
    std::map<std::string, hailort::BufferPtr> hef_bytes;
};

// Member order is destruction order reversed, and it matters:
//  - bindings and the configured model go first (the HRPC client's destructor sends
//    CONFIGURED_INFER_MODEL__DESTROY through the VDevice's connection);
//  - the staging buffers outlive the configured model: upstream keeps inference buffers until
//    the configured model is released (async_infer_basic_example), and a timed-out job may
//    still write into them;
//  - the VDevice goes last: InferModelBase holds only a reference to it
//    (net_flow/pipeline/infer_model_internal.hpp, m_vdevice) and the HRPC clients only a
//    weak_ptr to its connection ("Lost communication with the server. This may happen if
//    VDevice is released while the InferModel is in use", infer_model_hrpc_client.cpp).
struct hp_model {
    std::shared_ptr<hailort::VDevice> vdevice;
    std::string hef_path;
    std::string group;
    std::vector<Stream> inputs;
    std::vector<Stream> outputs;
    std::shared_ptr<hailort::InferModel> infer_model;
    hailort::ConfiguredInferModel configured;
    hailort::ConfiguredInferModel::Bindings bindings;
    std::vector<std::pair<uint32_t, hailort::BufferPtr>> cache_snapshot;
    hailort::BufferPtr hef; // the shared bytes the model was created from
    std::string poisoned; // non-empty: the first failure; every later call is refused with it
    bool timed_out = false; // a job may still be in flight: destroying would free under it
};

namespace {

const std::vector<Stream> *streams_of(const hp_model *model, int is_output)
{
    return (0 != is_output) ? &model->outputs : &model->inputs;
}

std::string group_context(const hp_model &model)
{
    return "group " + quoted(model.group) + " of " + model.hef_path;
}

// Over RPC any failed run shuts the configured model down on the server
// (configured_infer_model_hrpc_client.cpp run_async calls shutdown() on failure), so after the
// first failure nothing else is sent: every later call names that first failure.
// A failed init_cache/update_cache_offset poisons too: the ring's read/write offsets are then
// unknown, and every later token would be computed against the wrong cache entries.
void poison(hp_model &model, const std::string &what, const char *why)
{
    if (model.poisoned.empty()) {
        model.poisoned = "refused: " + what + "; " + why + ": configure the group again";
    }
}

constexpr const char *RUN_FAILED = "any failed run shuts the configured model down over HailoRT's RPC client";
constexpr const char *CACHE_FAILED = "the KV cache offsets are unknown after a failed cache call";

// "HAILO_TIMEOUT (4)"-style text: hailo_get_status_message returns the enum's name (hailort.h).
std::string status_text(hailo_status status)
{
    const char *name = hailo_get_status_message(status);
    return std::string(nullptr != name ? name : "unknown status") + " (" + std::to_string(static_cast<int>(status)) +
           ")";
}

// Configure/create failures the RPC deadline or memory cause: say what raises the deadline
// (HAILO_REQUEST_TIMEOUT_SECONDS, read by hrpc/client.cpp; create_infer_model waits
// LONG_RPC_ACTION_TIMEOUT = 45 s, hrpc_protocol/serializer.hpp) and how big the HEF is.
std::string deadline_hint(hailo_status status, size_t hef_size)
{
    switch (status) {
    case HAILO_TIMEOUT:
    case HAILO_OUT_OF_HOST_MEMORY:
    case HAILO_OUT_OF_HOST_CMA_MEMORY:
    case HAILO_OUT_OF_FW_MEMORY:
    case HAILO_OUT_OF_DESCRIPTORS:
    case HAILO_RPC_FAILED:
    case HAILO_COMMUNICATION_CLOSED:
        return "; the HEF is " + std::to_string(hef_size) +
               " bytes: the RPC deadline for create/configure is 45 s (LONG_RPC_ACTION_TIMEOUT), raised with "
               "the environment variable HAILO_REQUEST_TIMEOUT_SECONDS, and the device must hold the HEF once "
               "per group";
    default:
        return "";
    }
}

} // namespace

// ---- vdevice --------------------------------------------------------------------------------

extern "C" int hp_vdevice_create(hp_vdevice **out, char *err, size_t err_len)
{
    return guarded("hp_vdevice_create", err, err_len, [&]() -> int {
        if (nullptr == out) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_vdevice_create: out is NULL");
        }
        *out = nullptr;

        // Defaults: device_count 1, no device ids, round robin, group "UNIQUE", no multi-process
        // service (HailoRTDefaults::get_vdevice_params, hailort_defaults.cpp). On Hailo-10H,
        // VDevice::create picks the HRPC client, which requires device_count == 1
        // (vdevice.cpp, vdevice_hrpc_client.cpp).
        hailo_vdevice_params_t params;
        hailo_status status = hailo_init_vdevice_params(&params);
        if (HAILO_SUCCESS != status) {
            return fail(err, err_len, status, "hailo_init_vdevice_params()");
        }
        params.device_count = 1;

        auto vdevice = hailort::VDevice::create_shared(params);
        if (!vdevice) {
            return fail(err, err_len, vdevice.status(), "VDevice::create_shared(device_count 1)");
        }

        auto handle = std::make_unique<hp_vdevice>();
        handle->vdevice = vdevice.release();
        std::memset(&handle->info, 0, sizeof(handle->info));
        handle->info.architecture = -1;

        // Description only: failures here are not errors.
        auto ids = handle->vdevice->get_physical_devices_ids();
        if (ids) {
            std::snprintf(handle->info.device_ids, sizeof(handle->info.device_ids), "%s",
                          join(ids.value(), ", ").c_str());
        }
        auto devices = handle->vdevice->get_physical_devices();
        if (devices && !devices.value().empty()) {
            auto arch = devices.value().front().get().get_architecture();
            if (arch) {
                handle->info.architecture = static_cast<int32_t>(arch.value());
            }
        }

        *out = handle.release();
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" void hp_vdevice_info_get(const hp_vdevice *vdevice, hp_vdevice_info *out)
{
    if (nullptr != vdevice && nullptr != out) {
        *out = vdevice->info;
    }
}

extern "C" void hp_vdevice_destroy(hp_vdevice *vdevice)
{
    // Destructors of HailoRT objects log failures instead of throwing; delete cannot throw here.
    delete vdevice;
}

// ---- HEF ------------------------------------------------------------------------------------

extern "C" int hp_hef_network_groups(const char *hef_path, char *names, size_t capacity, size_t *needed,
                                     char *err, size_t err_len)
{
    return guarded("hp_hef_network_groups", err, err_len, [&]() -> int {
        if (nullptr == hef_path || nullptr == needed || (nullptr == names && 0 != capacity)) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_hef_network_groups: NULL argument");
        }
        auto hef = hailort::Hef::create(std::string(hef_path));
        if (!hef) {
            return fail(err, err_len, hef.status(), "Hef::create(" + quoted(hef_path) + ")");
        }
        const std::vector<std::string> groups = hef.value().get_network_groups_names();

        size_t total = 0;
        for (const auto &group : groups) {
            total += group.size() + 1;
        }
        *needed = total;
        if (capacity < total) {
            return fail(err, err_len, HAILO_INSUFFICIENT_BUFFER,
                        "hp_hef_network_groups: " + std::to_string(total) + " bytes needed, " +
                            std::to_string(capacity) + " given");
        }
        size_t offset = 0;
        for (const auto &group : groups) {
            std::memcpy(names + offset, group.c_str(), group.size() + 1);
            offset += group.size() + 1;
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}

// ---- model ----------------------------------------------------------------------------------

extern "C" int hp_model_create(hp_vdevice *vdevice, const char *hef_path, const char *group,
                               const char *const *float_inputs, size_t float_input_count, hp_model **out,
                               char *err, size_t err_len)
{
    return guarded("hp_model_create", err, err_len, [&]() -> int {
        if (nullptr == vdevice || nullptr == hef_path || nullptr == group || nullptr == out ||
            (nullptr == float_inputs && 0 != float_input_count)) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_create: NULL argument");
        }
        *out = nullptr;

        auto model = std::make_unique<hp_model>();
        model->vdevice = vdevice->vdevice;
        model->hef_path = hef_path;
        model->group = group;

        // The HEF's bytes once per vdevice (see hp_vdevice::hef_bytes for why not more).
        auto &shared = vdevice->hef_bytes[model->hef_path];
        if (!shared) {
            std::ifstream file(model->hef_path, std::ios::binary | std::ios::ate);
            const std::streamoff end = file ? static_cast<std::streamoff>(file.tellg()) : -1;
            if (!file || end <= 0) {
                vdevice->hef_bytes.erase(model->hef_path);
                return fail(err, err_len, HAILO_OPEN_FILE_FAILURE,
                            "hp_model_create: cannot read " + quoted(model->hef_path) +
                                " (missing, empty or not a regular file)");
            }
            auto buffer = hailort::Buffer::create_shared(static_cast<size_t>(end),
                                                          hailort::BufferStorageParams::create_dma());
            if (!buffer) {
                vdevice->hef_bytes.erase(model->hef_path);
                return fail(err, err_len, buffer.status(),
                            "hp_model_create: allocating " + std::to_string(end) + " bytes for " +
                                quoted(model->hef_path));
            }
            file.seekg(0);
            file.read(reinterpret_cast<char *>(buffer.value()->data()), end);
            if (file.gcount() != end) {
                vdevice->hef_bytes.erase(model->hef_path);
                return fail(err, err_len, HAILO_FILE_OPERATION_FAILURE,
                            "hp_model_create: short read of " + quoted(model->hef_path) + ": " +
                                std::to_string(file.gcount()) + " of " + std::to_string(end) + " bytes");
            }
            shared = buffer.release();
        }
        model->hef = shared;

        // The MemoryView overload: on Hailo-10H, VDeviceHrpcClient overrides only it and the
        // path one (which reads the file and calls it); the Hef and shared_ptr<Buffer>
        // overloads fall back to the local base class (vdevice_hrpc_client.cpp, vdevice.hpp).
        // The name must be exactly a network group name (infer_model.cpp InferModelBase::create).
        auto infer_model = model->vdevice->create_infer_model(
            hailort::MemoryView(*model->hef), model->group);
        if (!infer_model) {
            return fail(err, err_len, infer_model.status(),
                        "VDevice::create_infer_model(" + quoted(model->hef_path) + ", " + quoted(model->group) +
                            ")" + deadline_hint(infer_model.status(), model->hef->size()));
        }
        model->infer_model = infer_model.release();

        // What genai's LLM server does per group (llm_server.cpp create_inference_managers_future,
        // llm_inference_manager.cpp): KV cache on, float32 for the RoPE inputs and all outputs.
        model->infer_model->set_enable_kv_cache(true);
        const std::vector<std::string> &input_names = model->infer_model->get_input_names();
        for (size_t i = 0; i < float_input_count; i++) {
            if (nullptr == float_inputs[i]) {
                return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_create: float_inputs contains NULL");
            }
            const std::string name(float_inputs[i]);
            if (std::find(input_names.begin(), input_names.end(), name) == input_names.end()) {
                return fail(err, err_len, HAILO_NOT_FOUND,
                            "hp_model_create: " + quoted(name) + " (to be set to FLOAT32) is not an input of " +
                                group_context(*model) + "; its inputs are: " + join(input_names, ", "));
            }
            auto input = model->infer_model->input(name);
            if (!input) {
                return fail(err, err_len, input.status(), "InferModel::input(" + quoted(name) + ")");
            }
            // InferStream copies share one pimpl (infer_model.cpp), so this changes the model.
            input.value().set_format_type(HAILO_FORMAT_TYPE_FLOAT32);
        }
        for (auto output : model->infer_model->outputs()) {
            output.set_format_type(HAILO_FORMAT_TYPE_FLOAT32);
        }

        // Read the streams now: configure() snapshots the frame sizes for its checks
        // (InferModelHrpcClient::configure), and run() validates against them.
        for (const auto &input : model->infer_model->inputs()) {
            model->inputs.push_back(describe_stream(input));
        }
        for (const auto &output : model->infer_model->outputs()) {
            model->outputs.push_back(describe_stream(output));
        }

        auto configured = model->infer_model->configure();
        if (!configured) {
            return fail(err, err_len, configured.status(),
                        "InferModel::configure() for " + group_context(*model) +
                            deadline_hint(configured.status(), model->hef->size()));
        }
        model->configured = configured.release();

        // One set of bindings over the staging buffers for the model's lifetime, as genai's
        // InferenceManager binds its buffers once (inference_manager.cpp).
        auto bindings = model->configured.create_bindings();
        if (!bindings) {
            return fail(err, err_len, bindings.status(),
                        "ConfiguredInferModel::create_bindings() for " + group_context(*model));
        }
        model->bindings = bindings.release();
        for (auto &stream : model->inputs) {
            auto binding = model->bindings.input(stream.name);
            if (!binding) {
                return fail(err, err_len, binding.status(), "Bindings::input(" + quoted(stream.name) + ")");
            }
            hailo_status status =
                binding.value().set_buffer(hailort::MemoryView(stream.staging.data(), stream.staging.size()));
            if (HAILO_SUCCESS != status) {
                return fail(err, err_len, status,
                            "Bindings::input(" + quoted(stream.name) + ").set_buffer(" +
                                std::to_string(stream.staging.size()) + " bytes)");
            }
        }
        for (auto &stream : model->outputs) {
            auto binding = model->bindings.output(stream.name);
            if (!binding) {
                return fail(err, err_len, binding.status(), "Bindings::output(" + quoted(stream.name) + ")");
            }
            hailo_status status =
                binding.value().set_buffer(hailort::MemoryView(stream.staging.data(), stream.staging.size()));
            if (HAILO_SUCCESS != status) {
                return fail(err, err_len, status,
                            "Bindings::output(" + quoted(stream.name) + ").set_buffer(" +
                                std::to_string(stream.staging.size()) + " bytes)");
            }
        }

        *out = model.release();
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" void hp_model_destroy(hp_model *model)
{
    if (nullptr != model && model->timed_out) {
        // A timed-out job may still complete: HailoRT's completion callback then writes into
        // the staging buffers and touches the configured model (the HRPC client's callback
        // holds a raw `this`, configured_infer_model_hrpc_client.cpp run_async_impl). Freeing
        // them would be a use-after-free, so the model is leaked, and the process says so.
        std::fprintf(stderr,
                     "hefprobe: leaking the configured model of %s: a run timed out and may still be in "
                     "flight; restart the process to release it\n",
                     group_context(*model).c_str());
        return;
    }
    delete model;
}

extern "C" size_t hp_model_stream_count(const hp_model *model, int is_output)
{
    return (nullptr == model) ? 0 : streams_of(model, is_output)->size();
}

extern "C" int hp_model_stream_info(const hp_model *model, int is_output, size_t index, hp_stream_info *out,
                                    char *err, size_t err_len)
{
    return guarded("hp_model_stream_info", err, err_len, [&]() -> int {
        if (nullptr == model || nullptr == out) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_stream_info: NULL argument");
        }
        const auto &streams = *streams_of(model, is_output);
        if (index >= streams.size()) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_stream_info: index " + std::to_string(index) + " out of " +
                            std::to_string(streams.size()));
        }
        const Stream &stream = streams[index];
        if (stream.name.size() >= sizeof(out->name)) {
            return fail(err, err_len, HAILO_INSUFFICIENT_BUFFER,
                        "hp_model_stream_info: stream name of " + std::to_string(stream.name.size()) +
                            " bytes does not fit HP_NAME_CAPACITY: " + stream.name);
        }
        std::memset(out, 0, sizeof(*out));
        std::memcpy(out->name, stream.name.c_str(), stream.name.size() + 1);
        out->height = stream.shape.height;
        out->width = stream.shape.width;
        out->features = stream.shape.features;
        out->format_type = static_cast<uint32_t>(stream.format.type);
        out->format_order = static_cast<uint32_t>(stream.format.order);
        out->frame_size = static_cast<uint64_t>(stream.frame_size);
        out->quant_info_count = static_cast<uint64_t>(stream.quant_infos.size());
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" int hp_model_stream_quant_infos(const hp_model *model, int is_output, size_t index, hp_quant_info *out,
                                           size_t capacity, size_t *count, char *err, size_t err_len)
{
    return guarded("hp_model_stream_quant_infos", err, err_len, [&]() -> int {
        if (nullptr == model || nullptr == count || (nullptr == out && 0 != capacity)) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_stream_quant_infos: NULL argument");
        }
        const auto &streams = *streams_of(model, is_output);
        if (index >= streams.size()) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_stream_quant_infos: index " + std::to_string(index) + " out of " +
                            std::to_string(streams.size()));
        }
        const auto &infos = streams[index].quant_infos;
        *count = infos.size();
        const size_t n = std::min(capacity, infos.size());
        for (size_t i = 0; i < n; i++) {
            out[i] = hp_quant_info{infos[i].qp_zp, infos[i].qp_scale, infos[i].limvals_min, infos[i].limvals_max};
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" int hp_model_run(hp_model *model, const hp_input *inputs, size_t input_count, const hp_output *outputs,
                            size_t output_count, uint32_t timeout_ms, char *err, size_t err_len)
{
    return guarded("hp_model_run", err, err_len, [&]() -> int {
        if (nullptr == model || (nullptr == inputs && 0 != input_count) ||
            (nullptr == outputs && 0 != output_count)) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_run: NULL argument");
        }
        if (!model->poisoned.empty()) {
            return fail(err, err_len, HAILO_INVALID_OPERATION, model->poisoned);
        }

        // Check everything before touching the staging buffers. Upstream only checks sizes
        // inside run (HAILO_INVALID_OPERATION, configured_infer_model_hrpc_client.cpp
        // validate_bindings) and, over HRPC, shuts the configured model down on any run_async
        // failure; so report mismatches here, with the numbers.
        if (input_count != model->inputs.size()) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_run: " + std::to_string(input_count) + " inputs given, " + group_context(*model) +
                            " has " + std::to_string(model->inputs.size()));
        }
        std::vector<const hp_input *> by_stream(model->inputs.size(), nullptr);
        for (size_t i = 0; i < input_count; i++) {
            const hp_input &given = inputs[i];
            if (nullptr == given.name || (nullptr == given.data && 0 != given.size)) {
                return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_run: input with NULL name or data");
            }
            size_t found = model->inputs.size();
            for (size_t s = 0; s < model->inputs.size(); s++) {
                if (model->inputs[s].name == given.name) {
                    found = s;
                    break;
                }
            }
            if (found == model->inputs.size()) {
                std::vector<std::string> names;
                for (const auto &stream : model->inputs) {
                    names.push_back(stream.name);
                }
                return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                            "hp_model_run: " + quoted(given.name) + " is not an input of " + group_context(*model) +
                                "; its inputs are: " + join(names, ", "));
            }
            if (nullptr != by_stream[found]) {
                return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                            "hp_model_run: input " + quoted(given.name) + " given twice");
            }
            if (given.size != model->inputs[found].frame_size) {
                return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                            "hp_model_run: input " + quoted(given.name) + " has " + std::to_string(given.size) +
                                " bytes, its frame size (InferStream::get_frame_size) is " +
                                std::to_string(model->inputs[found].frame_size));
            }
            by_stream[found] = &given;
        }
        if (output_count != model->outputs.size()) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_run: " + std::to_string(output_count) + " output buffers given, " +
                            group_context(*model) + " has " + std::to_string(model->outputs.size()) + " outputs");
        }
        for (size_t i = 0; i < output_count; i++) {
            if ((nullptr == outputs[i].data && 0 != outputs[i].size) || outputs[i].size != model->outputs[i].frame_size) {
                return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                            "hp_model_run: output buffer " + std::to_string(i) + " (" + quoted(model->outputs[i].name) +
                                ") has " + std::to_string(outputs[i].size) + " bytes, its frame size is " +
                                std::to_string(model->outputs[i].frame_size));
            }
        }

        for (size_t s = 0; s < model->inputs.size(); s++) {
            if (0 != by_stream[s]->size) {
                std::memcpy(model->inputs[s].staging.data(), by_stream[s]->data, by_stream[s]->size);
            }
        }

        // run = wait_for_async_ready + run_async + job.wait, all within timeout
        // (ConfiguredInferModelBase::run, infer_model.cpp).
        const hailo_status status = model->configured.run(model->bindings, std::chrono::milliseconds(timeout_ms));
        if (HAILO_TIMEOUT == status) {
            // The job may still be in flight and complete into the staging buffers later: a next
            // run could read a mix of two inferences, and destroying the model would free them
            // under it (hp_model_destroy leaks it instead).
            model->timed_out = true;
        }
        if (HAILO_SUCCESS != status) {
            poison(*model, "hp_model_run: an earlier ConfiguredInferModel::run(bindings, " +
                               std::to_string(timeout_ms) + " ms) for " + group_context(*model) + " failed with " +
                               status_text(status) +
                               (HAILO_TIMEOUT == status ? "; the job may still be in flight, so the model is leaked, "
                                                          "not destroyed"
                                                        : ""),
                   RUN_FAILED);
            return fail(err, err_len, status,
                        "ConfiguredInferModel::run(bindings, " + std::to_string(timeout_ms) + " ms) for " +
                            group_context(*model));
        }

        for (size_t i = 0; i < output_count; i++) {
            if (0 != outputs[i].size) {
                std::memcpy(outputs[i].data, model->outputs[i].staging.data(), outputs[i].size);
            }
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}

// ---- KV cache -------------------------------------------------------------------------------

extern "C" int hp_model_init_cache(hp_model *model, uint32_t read_offset, char *err, size_t err_len)
{
    return guarded("hp_model_init_cache", err, err_len, [&]() -> int {
        if (nullptr == model) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_init_cache: NULL model");
        }
        if (!model->poisoned.empty()) {
            return fail(err, err_len, HAILO_INVALID_OPERATION, model->poisoned);
        }
        const hailo_status status = model->configured.init_cache(read_offset);
        if (HAILO_SUCCESS != status) {
            const std::string what = "ConfiguredInferModel::init_cache(" + std::to_string(read_offset) + ") for " +
                                     group_context(*model);
            poison(*model, "an earlier " + what + " failed with " + status_text(status), CACHE_FAILED);
            return fail(err, err_len, status, what);
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" int hp_model_update_cache_offset(hp_model *model, int32_t offset_delta_entries, char *err, size_t err_len)
{
    return guarded("hp_model_update_cache_offset", err, err_len, [&]() -> int {
        if (nullptr == model) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_update_cache_offset: NULL model");
        }
        if (!model->poisoned.empty()) {
            return fail(err, err_len, HAILO_INVALID_OPERATION, model->poisoned);
        }
        const hailo_status status = model->configured.update_cache_offset(offset_delta_entries);
        if (HAILO_SUCCESS != status) {
            const std::string what = "ConfiguredInferModel::update_cache_offset(" + std::to_string(offset_delta_entries) +
                                     ") for " + group_context(*model);
            poison(*model, "an earlier " + what + " failed with " + status_text(status), CACHE_FAILED);
            return fail(err, err_len, status, what);
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" int hp_model_cache_snapshot(hp_model *model, size_t *count, char *err, size_t err_len)
{
    return guarded("hp_model_cache_snapshot", err, err_len, [&]() -> int {
        if (nullptr == model || nullptr == count) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_cache_snapshot: NULL argument");
        }
        if (!model->poisoned.empty()) {
            return fail(err, err_len, HAILO_INVALID_OPERATION, model->poisoned);
        }
        *count = 0;
        model->cache_snapshot.clear();
        // A copy of every whole backing ring, keyed by cache id (ConfiguredInferModelImpl::
        // get_cache_buffers, infer_model.cpp). Over Hailo-10H's RPC in v5.2.0 the client parses
        // its own request as the reply (configured_infer_model_hrpc_client.cpp): the result is
        // passed on as is, and the caller recognises it (entries with no data).
        auto buffers = model->configured.get_cache_buffers();
        if (!buffers) {
            return fail(err, err_len, buffers.status(),
                        "ConfiguredInferModel::get_cache_buffers() for " + group_context(*model));
        }
        for (const auto &entry : buffers.value()) {
            model->cache_snapshot.emplace_back(entry.first, entry.second);
        }
        std::sort(model->cache_snapshot.begin(), model->cache_snapshot.end(),
                  [](const auto &a, const auto &b) { return a.first < b.first; });
        *count = model->cache_snapshot.size();
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" int hp_model_cache_entry(const hp_model *model, size_t index, uint32_t *cache_id, uint64_t *size,
                                    char *err, size_t err_len)
{
    return guarded("hp_model_cache_entry", err, err_len, [&]() -> int {
        if (nullptr == model || nullptr == cache_id || nullptr == size) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_cache_entry: NULL argument");
        }
        if (index >= model->cache_snapshot.size()) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_cache_entry: index " + std::to_string(index) + " out of " +
                            std::to_string(model->cache_snapshot.size()) + " (take a snapshot first)");
        }
        const auto &entry = model->cache_snapshot[index];
        *cache_id = entry.first;
        *size = (nullptr == entry.second) ? 0 : static_cast<uint64_t>(entry.second->size());
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" int hp_model_cache_copy(const hp_model *model, size_t index, uint8_t *dst, size_t dst_len, char *err,
                                   size_t err_len)
{
    return guarded("hp_model_cache_copy", err, err_len, [&]() -> int {
        if (nullptr == model || (nullptr == dst && 0 != dst_len)) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_cache_copy: NULL argument");
        }
        if (index >= model->cache_snapshot.size()) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_cache_copy: index " + std::to_string(index) + " out of " +
                            std::to_string(model->cache_snapshot.size()));
        }
        const auto &buffer = model->cache_snapshot[index].second;
        const size_t size = (nullptr == buffer) ? 0 : buffer->size();
        if (dst_len != size) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT,
                        "hp_model_cache_copy: cache " + std::to_string(model->cache_snapshot[index].first) + " has " +
                            std::to_string(size) + " bytes, destination " + std::to_string(dst_len));
        }
        if (0 != size) {
            std::memcpy(dst, buffer->data(), size);
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}

extern "C" void hp_model_cache_release(hp_model *model)
{
    if (nullptr != model) {
        // clear() destroys shared_ptrs; Buffer's destructor does not throw.
        model->cache_snapshot.clear();
        model->cache_snapshot.shrink_to_fit();
    }
}

extern "C" int hp_model_update_cache_buffer(hp_model *model, uint32_t cache_id, const uint8_t *data, size_t size,
                                            char *err, size_t err_len)
{
    return guarded("hp_model_update_cache_buffer", err, err_len, [&]() -> int {
        if (nullptr == model || (nullptr == data && 0 != size)) {
            return fail(err, err_len, HAILO_INVALID_ARGUMENT, "hp_model_update_cache_buffer: NULL argument");
        }
        if (!model->poisoned.empty()) {
            return fail(err, err_len, HAILO_INVALID_OPERATION, model->poisoned);
        }
        // Overwrites the whole backing ring; the size must match it exactly
        // (CacheBuffer::write_cache, cache_buffer.cpp). HailoRT only reads from the view.
        const hailo_status status =
            model->configured.update_cache_buffer(cache_id, hailort::MemoryView::create_const(data, size));
        if (HAILO_SUCCESS != status) {
            return fail(err, err_len, status,
                        "ConfiguredInferModel::update_cache_buffer(" + std::to_string(cache_id) + ", " +
                            std::to_string(size) + " bytes) for " + group_context(*model));
        }
        return static_cast<int>(HAILO_SUCCESS);
    });
}
