module {
  func.func @nncert(%arg0: !torch.vtensor<[1],f32>) -> !torch.vtensor<[1],si32> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %none = torch.constant.none
    %0 = torch.operator "onnx.Cast"(%arg0) {torch.onnx.to = 6 : si64} : (!torch.vtensor<[1],f32>) -> !torch.vtensor<[1],si32> 
    return %0 : !torch.vtensor<[1],si32>
  }
}
